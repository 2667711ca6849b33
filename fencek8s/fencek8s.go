// Package fencek8s is a fence driver on Kubernetes Lease objects
// (coordination.k8s.io/v1), one per key, in one namespace, through
// client-go. It keeps the Lease fields' meaning in client-go's leader
// election (tools/leaderelection with a LeaseLock), so fence contenders and
// client-go electors can share a Lease, during a migration from one to the
// other: neither takes it while the other's holder renews it.
//
// # Protocol
//
// Every write is an update conditioned on the resourceVersion the driver
// last read or wrote: the API server refuses it with 409 Conflict if anyone
// wrote the Lease since, so of two contenders exactly one wins.
//
//   - TryAcquire reads the Lease (creating it if there is none). It takes
//     a Lease that names no holder at once; one that names a holder only
//     once this driver has seen it unchanged (the same resourceVersion)
//     for a full leaseDurationSeconds, measured on this process's
//     monotonic clock from the first time it read that version. It never
//     compares the Lease's renewTime with its own clock: another machine
//     wrote it. Taking the Lease sets holderIdentity to the owner id,
//     acquireTime and renewTime to now, leaseDurationSeconds to the TTL
//     rounded up to whole seconds plus one (client-go's electors see
//     renewTime in whole seconds only), and adds one to leaseTransitions.
//   - Extend writes renewTime (and the duration) again, conditioned on the
//     resourceVersion of our last write; if its reply was lost, it reads
//     the Lease and carries on if it still names this owner.
//   - Release clears holderIdentity the way client-go's elector does when
//     it releases (leaseDurationSeconds 1), conditioned the same way. The
//     Lease object stays: it carries the token counter.
//   - Waiters (fence.Watcher) watch the Lease and are woken when it is
//     released or deleted. An expiry writes nothing, so a waiter wakes for
//     it at the time its own observation runs out (HeldError's ExpiresIn).
//
// # Lock-delay
//
// A lease taken with a lock-delay (fence.WithLockDelay) carries it in the
// annotation "fencing.github.io/lock-delay", as milliseconds, ":", and the
// owner id of the holder it belongs to. A fence contender takes a Lease
// that names that holder only once it has seen it unchanged for
// leaseDurationSeconds and the delay after it; until then Inspect and
// List show the lost holder, ExpiresIn the time until the key is free.
// The holder's claim refuses to renew or release once its TTL has passed
// since it sent its last write that landed: no contender can have judged
// the lease over before that, and after it a release would lift the
// delay. client-go's electors know nothing of the annotation: they take
// the Lease after leaseDurationSeconds, delay or not. An elector that
// takes it keeps the annotation, which names another holder than the
// elector, so fence contenders ignore it then.
//
// # Tokens
//
// The token of an acquisition is base + leaseTransitions, where base is an
// integer kept in the Lease's annotation "fencing.github.io/token-base".
// Within one Lease object it grows: every acquisition, fence's or
// client-go's, adds one to leaseTransitions in a conditional write, and
// nobody writes base but a fence acquisition that keeps base +
// leaseTransitions growing. A client-go holder's token is the same sum, as
// Inspect reports it, so tokens grow across holders of both kinds.
//
// When fence creates a Lease, or finds one without base (created by
// client-go, or its annotation removed), it seeds base so that the token is
// the current time in microseconds (Unix). A deleted and re-created Lease
// therefore starts above every token of its predecessor: each of those was
// at most its own issue time in microseconds (seeded with the time, then
// one more per acquisition, and acquisitions are writes to the API server,
// far more than a microsecond apart), and the new seed is taken later. The
// one assumption is that the clock of the machine that seeds is not behind
// the clocks of the earlier seeders by more than the time between the old
// Lease's last acquisition and the seeding.
//
// leaseTransitions is a 32-bit field: a fence acquisition that would take
// it past 2^30 moves the count into base and starts leaseTransitions at 1
// again, leaving the token the same sum.
//
// # Names
//
// A key that is a valid Lease name (a DNS-1123 subdomain) without "--" is
// used as the name itself, so fence can share a Lease with a client-go
// elector by its name. Any other key maps to a readable part (lowercase
// letters and digits, other runs of characters as "-", at most 40) then "--"
// and 16 hex digits of the key's SHA-256; the annotation
// "fencing.github.io/key" keeps the key.
package fencek8s

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/metajson"
	"github.com/fencing/fence/internal/kit/sighting"
	"github.com/fencing/fence/internal/kit/unavail"
)

// The annotations the driver keeps on a Lease.
const (
	// AnnotationKey is the fence key of a Lease whose name is not the key.
	AnnotationKey = "fencing.github.io/key"
	// AnnotationTokenBase is the token counter's base; the token is base +
	// spec.leaseTransitions.
	AnnotationTokenBase = "fencing.github.io/token-base"
	// AnnotationMeta is the holder's metadata (Request.Meta) as JSON.
	AnnotationMeta = "fencing.github.io/meta"
	// AnnotationLockDelay is the holder's lock-delay: milliseconds, ":",
	// and the owner id of the holder it belongs to.
	AnnotationLockDelay = "fencing.github.io/lock-delay"
)

// maxTransitions is where a fence acquisition moves leaseTransitions into
// the token base, well below the field's 32-bit limit.
const maxTransitions = 1 << 30

// Store is a fence.Driver on the Leases of one namespace. It is safe for
// concurrent use.
type Store struct {
	leases    coordinationclient.LeaseInterface
	namespace string

	seen sighting.Book // by Lease name: when this driver first read each resourceVersion
}

var (
	_ fence.Driver      = (*Store)(nil)
	_ fence.Watcher     = (*Store)(nil)
	_ fence.Inspector   = (*Store)(nil)
	_ fence.Lister      = (*Store)(nil)
	_ fence.LockDelayer = (*Store)(nil)
)

// SupportsLockDelay implements fence.LockDelayer: the Store keeps the
// lock-delay of locks in their Lease, for fence contenders (see the
// package documentation for client-go's electors).
func (d *Store) SupportsLockDelay(k fence.Kind) bool { return k == fence.KindLock }

// New returns a Store on the Leases of namespace, through cs. It needs
// get, list, watch, create and update on leases there (delete only to let
// an operator remove them); see docs/kubernetes.md for a Role.
func New(cs kubernetes.Interface, namespace string) *Store {
	return &Store{leases: cs.CoordinationV1().Leases(namespace), namespace: namespace}
}

// NewForConfig is New with a clientset made from cfg (for example
// rest.InClusterConfig's, or clientcmd's from a kubeconfig).
func NewForConfig(cfg *rest.Config, namespace string) (*Store, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("fencek8s: %w", err)
	}
	return New(cs, namespace), nil
}

// Namespace returns the namespace of the driver's Leases.
func (d *Store) Namespace() string { return d.namespace }

// Name returns the name of the Lease that holds key's lease.
func Name(key string) string {
	if !strings.Contains(key, "--") && len(validation.IsDNS1123Subdomain(key)) == 0 {
		return key
	}
	var b strings.Builder
	dash := true // no leading "-"
	for _, r := range strings.ToLower(key) {
		if b.Len() >= 40 {
			break
		}
		if 'a' <= r && r <= 'z' || '0' <= r && r <= '9' {
			b.WriteRune(r)
			dash = false
		} else if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	readable := strings.TrimRight(b.String(), "-")
	if readable == "" {
		readable = "key"
	}
	sum := sha256.Sum256([]byte(key))
	return readable + "--" + hex.EncodeToString(sum[:8])
}

// durationSeconds is the leaseDurationSeconds for a TTL: whole seconds,
// rounded up, plus one. The extra second is for client-go's electors:
// they notice a change of the Lease by comparing its fields with
// renewTime cut to whole seconds, so two renewals within one second look
// like one to them, and an elector may start counting the lease duration
// up to a second before our last renewal.
func durationSeconds(ttl time.Duration) (int32, error) {
	s := (ttl+time.Second-1)/time.Second + 1
	if s > math.MaxInt32 {
		return 0, fmt.Errorf("%w: %v is longer than a Lease can say", fence.ErrInvalidTTL, ttl)
	}
	return int32(s), nil
}

// TryAcquire implements fence.Driver. Its errors that say the API server
// or its storage could not answer match fence.ErrUnavailable.
func (d *Store) TryAcquire(ctx context.Context, req fence.Request) (_ fence.Claim, err error) {
	defer func() { err = unavail.Mark(err, unavailable) }()
	secs, err := durationSeconds(req.TTL)
	if err != nil {
		return nil, err
	}
	name := Name(req.Key)
	for attempt := 0; ; attempt++ {
		l, err := d.leases.Get(ctx, name, metav1.GetOptions{})
		sent := time.Now() // the write's, no later than it is sent
		switch {
		case apierrors.IsNotFound(err):
			l, err = d.leases.Create(ctx, d.take(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name}}, req, secs), metav1.CreateOptions{})
		case err != nil:
		case holderOf(l) != "":
			left, _, oerr := d.observe(l)
			if oerr != nil {
				return nil, fmt.Errorf("fencek8s: acquire %q: %w", req.Key, oerr)
			}
			if left > 0 {
				return nil, &fence.HeldError{Key: req.Key, Holder: ptr(d.holder(req.Key, l, left))}
			}
			fallthrough // seen unchanged for a full lease duration (and delay): expired
		default:
			l, err = d.leases.Update(ctx, d.take(l.DeepCopy(), req, secs), metav1.UpdateOptions{})
		}
		if err == nil {
			d.forget(name)
			return d.newClaim(req, token(l), l, sent), nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("fencek8s: acquire %q: %w", req.Key, err)
		}
		// Someone else wrote the Lease first; look again.
		if attempt == 2 {
			return nil, &fence.HeldError{Key: req.Key}
		}
	}
}

// take makes l name req's owner as its holder, with the next token.
func (d *Store) take(l *coordinationv1.Lease, req fence.Request, secs int32) *coordinationv1.Lease {
	trans := int64(value(l.Spec.LeaseTransitions))
	base, ok := tokenBase(l)
	us := time.Now().UnixMicro()
	switch {
	case l.ResourceVersion == "":
		// A new Lease: the token is the time in microseconds (see the
		// package doc), and leaseTransitions starts at 0, as client-go's.
		base, trans = us, 0
	case !ok:
		// No base: seed it the same way, unless the count alone is
		// already beyond the time.
		base, trans = max(us-(trans+1), 0), trans+1
	case trans+1 > maxTransitions:
		base, trans = base+trans, 1
	default:
		trans++
	}
	if l.Annotations == nil {
		l.Annotations = make(map[string]string)
	}
	l.Annotations[AnnotationTokenBase] = strconv.FormatInt(base, 10)
	if l.Name != req.Key {
		l.Annotations[AnnotationKey] = req.Key
	}
	if len(req.Meta) > 0 {
		l.Annotations[AnnotationMeta] = metajson.Encode(req.Meta)
	} else {
		delete(l.Annotations, AnnotationMeta)
	}
	setLockDelay(l, req)
	now := metav1.NowMicro()
	l.Spec.HolderIdentity = ptr(req.Owner)
	l.Spec.LeaseDurationSeconds = ptr(secs)
	l.Spec.AcquireTime = &now
	l.Spec.RenewTime = &now
	l.Spec.LeaseTransitions = ptr(int32(trans))
	return l
}

// token is the token of l's holder: base + leaseTransitions.
func token(l *coordinationv1.Lease) int64 {
	base, _ := tokenBase(l)
	return base + int64(value(l.Spec.LeaseTransitions))
}

func tokenBase(l *coordinationv1.Lease) (int64, bool) {
	b, err := strconv.ParseInt(l.Annotations[AnnotationTokenBase], 10, 64)
	return b, err == nil && b >= 0
}

// observe records that this driver read l, held, and returns how much
// longer l blocks its key without a write (blocked: the lease duration,
// then its holder's lock-delay) and how much longer its holder may hold it
// (lease: the lease duration alone), from the first time this driver read
// l's resourceVersion. A malformed lock-delay annotation is an error: how
// long the key is blocked is unknown.
func (d *Store) observe(l *coordinationv1.Lease) (blocked, lease time.Duration, err error) {
	delay, err := lockDelay(l)
	if err != nil {
		return 0, 0, err
	}
	if testHookDelay == "ignore-delay" {
		delay = 0
	}
	blocked = d.seen.Left(l.Name, l.ResourceVersion, duration(l)+delay, time.Now())
	if testHookDelay == "resume-in-delay" {
		return blocked, blocked, nil
	}
	return blocked, blocked - delay, nil
}

// Test hook: names a broken lock-delay mode (SetDelayMutant), for the
// mutant tests that show the lock-delay tests can fail.
var testHookDelay string

// setLockDelay sets l's lock-delay annotation to req's delay (locks only),
// for req's owner, or removes it.
func setLockDelay(l *coordinationv1.Lease, req fence.Request) {
	if req.Kind != fence.KindLock || req.LockDelay <= 0 {
		delete(l.Annotations, AnnotationLockDelay)
		return
	}
	ms := (req.LockDelay + time.Millisecond - 1) / time.Millisecond // rounded up: never shorter than asked
	l.Annotations[AnnotationLockDelay] = strconv.FormatInt(int64(ms), 10) + ":" + req.Owner
}

// lockDelay returns the lock-delay of l's holder: that of its annotation,
// if the annotation names that holder (a client-go elector that took the
// Lease keeps a former holder's annotation, and has no delay).
func lockDelay(l *coordinationv1.Lease) (time.Duration, error) {
	v, ok := l.Annotations[AnnotationLockDelay]
	if !ok {
		return 0, nil
	}
	ms, owner, found := strings.Cut(v, ":")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !found || err != nil || n < 0 || n > math.MaxInt64/int64(time.Millisecond) {
		return 0, fmt.Errorf("lease %s: malformed annotation %s=%q: want milliseconds:owner", l.Name, AnnotationLockDelay, v)
	}
	if owner != holderOf(l) {
		return 0, nil
	}
	return time.Duration(n) * time.Millisecond, nil
}

func (d *Store) forget(name string) { d.seen.Forget(name) }

func duration(l *coordinationv1.Lease) time.Duration {
	return time.Duration(value(l.Spec.LeaseDurationSeconds)) * time.Second
}

func holderOf(l *coordinationv1.Lease) string { return value(l.Spec.HolderIdentity) }

// keyOf returns the fence key of a Lease: its annotation, or its name.
func keyOf(l *coordinationv1.Lease) string {
	if k, ok := l.Annotations[AnnotationKey]; ok {
		return k
	}
	return l.Name
}

// holder describes l's holder; left is how long it may still hold l.
func (d *Store) holder(key string, l *coordinationv1.Lease, left time.Duration) fence.Holder {
	h := fence.Holder{Key: key, Owner: holderOf(l), Token: token(l), ExpiresIn: max(left, time.Millisecond)}
	h.Meta = metajson.Decode(l.Annotations[AnnotationMeta])
	return h
}

// Inspect implements fence.Inspector. A Lease that names a holder is held
// until this driver has seen it unchanged for a full lease duration (and
// its holder's lock-delay), as for TryAcquire: its first Inspect of a
// Lease reports the whole duration left, however long ago the holder last
// renewed. During a lock-delay it shows the lost holder.
func (d *Store) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	l, err := d.leases.Get(ctx, Name(key), metav1.GetOptions{})
	if apierrors.IsNotFound(err) || err == nil && holderOf(l) == "" {
		return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
	}
	if err != nil {
		return fence.Holder{}, fmt.Errorf("fencek8s: inspect %q: %w", key, err)
	}
	left, _, err := d.observe(l)
	if err != nil {
		return fence.Holder{}, fmt.Errorf("fencek8s: inspect %q: %w", key, err)
	}
	if left <= 0 {
		return fence.Holder{}, fmt.Errorf("%w: %q expired: unchanged for its lease duration and lock-delay", fence.ErrNotHeld, key)
	}
	return d.holder(key, l, left), nil
}

// List implements fence.Lister: every Lease of the namespace that names a
// holder, fence's or client-go's, whose key starts with prefix, but those
// this driver has seen unchanged for a full lease duration and lock-delay
// (as Inspect).
func (d *Store) List(ctx context.Context, prefix string) ([]fence.Holder, error) {
	var hs []fence.Holder
	opts := metav1.ListOptions{Limit: 500}
	for {
		list, err := d.leases.List(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("fencek8s: list: %w", err)
		}
		for i := range list.Items {
			l := &list.Items[i]
			if k := keyOf(l); holderOf(l) != "" && strings.HasPrefix(k, prefix) {
				left, _, err := d.observe(l)
				if err != nil {
					return nil, fmt.Errorf("fencek8s: list: %w", err)
				}
				if left > 0 {
					hs = append(hs, d.holder(k, l, left))
				}
			}
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	slices.SortFunc(hs, func(a, b fence.Holder) int { return strings.Compare(a.Key, b.Key) })
	return hs, nil
}

// Watch implements fence.Watcher: a watch on key's Lease that signals when
// it names no holder (released) or is deleted.
func (d *Store) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	w, err := d.leases.Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", Name(key)).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("fencek8s: watch %q: %w", key, err)
	}
	ch := make(chan struct{}, 1)
	go func() {
		defer close(ch)
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.ResultChan():
				if !ok || e.Type == watch.Error {
					return // the Client polls
				}
				if l, isLease := e.Object.(*coordinationv1.Lease); isLease && e.Type != watch.Deleted && holderOf(l) != "" {
					continue
				}
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}()
	return ch, nil
}

func ptr[T any](v T) *T { return &v }

func value[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
