package fenceredis

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
)

// ErrNoQuorum matches the errors of a Redlock operation that could not
// reach a quorum of servers (N/2+1 of N) in time because servers failed
// or were too slow, as opposed to a key held by another owner. Those of
// an acquisition (TryAcquire, Resume) also match fence.ErrUnavailable, so
// that a waiting Acquire waits for the servers to come back.
var ErrNoQuorum = errors.New("fenceredis: no quorum of redlock servers")

// Redlock is the fence driver over N independent Redis servers (no
// replication between them; N = 3 or 5 typically) with the Redlock
// algorithm: a lease is held when a quorum of N/2+1 servers hold it.
//
// Acquire runs in two phases, each on every server at once:
//
//  1. take the lock (SET NX PX) and read the server's next token,
//     max(counter+1, server time in µs), without issuing it;
//  2. with a quorum, choose the highest of the quorum's proposals and
//     raise the counter of each server that still holds the lock to it;
//     succeed only if a quorum raised it, all within ttl - drift of the
//     start (drift = ttl/100 + 2ms).
//
// A single round's "max of the majority's counters" is not monotonic: with
// three servers, acquisitions on {A,B}, {B,C}, {A,C} can return 1, 2, 2.
// Phase 2 makes any later majority meet a server that already holds the
// chosen token. If a quorum is not reached, the lock is deleted on every
// server again.
//
// Extend needs a quorum; so does Release, which is sent to every server.
// An Extend refused by so many servers that no quorum can hold the lease
// returns ErrNotHeld (the lease is lost at once); one that fails for
// unreachable servers returns ErrNoQuorum, and the Client retries until
// the lease's validity ends. Waiters subscribe on every server.
//
// Redlock keeps a lock-delay (fence.LockDelayer; redlockdelay.go) and
// resumes a lease that a quorum still holds (fence.Resumer;
// redlockresume.go), both by the same majority rule.
//
// See docs/redis.md for what Redlock does and does not promise.
type Redlock struct {
	stores  []*Store
	quorum  int
	running sync.WaitGroup // calls gather left running on slower servers
}

var (
	_ fence.Driver    = (*Redlock)(nil)
	_ fence.Watcher   = (*Redlock)(nil)
	_ fence.Inspector = (*Redlock)(nil)
	_ fence.Lister    = (*Redlock)(nil)
)

// NewRedlock returns a Redlock driver over clients, one per independent
// server. The options apply to every server. Give each client
// ContextTimeoutEnabled, so that a slow server cannot hold an operation
// past its deadline.
func NewRedlock(clients []redis.UniversalClient, opts ...Option) (*Redlock, error) {
	if len(clients) == 0 {
		return nil, errors.New("fenceredis: redlock needs at least one server")
	}
	r := &Redlock{quorum: len(clients)/2 + 1}
	for _, c := range clients {
		s, err := New(c, opts...)
		if err != nil {
			return nil, err
		}
		r.stores = append(r.stores, s)
	}
	return r, nil
}

// Quorum returns how many servers must agree: N/2+1.
func (r *Redlock) Quorum() int { return r.quorum }

// closeGrace bounds how long Close waits for calls still running on slower
// servers.
const closeGrace = 2 * time.Second

// Close waits up to two seconds for calls still running on slower servers
// (the rest of a release that already had its quorum, say), so that
// closing the clients right after a Release does not leave the lock on
// them until its TTL, and stops the subscriptions on every server. It does
// not close the clients.
func (r *Redlock) Close() error {
	done := make(chan struct{})
	go func() {
		r.running.Wait()
		close(done)
	}()
	timer := time.NewTimer(closeGrace)
	select {
	case <-done:
	case <-timer.C:
	}
	timer.Stop()
	for _, s := range r.stores {
		s.Close()
	}
	return nil
}

func drift(ttl time.Duration) time.Duration { return ttl/100 + 2*time.Millisecond }

// outcome is one server's answer.
type outcome[T any] struct {
	v   T
	err error
}

// gather calls call on every store at once and collects the answers in the
// order they arrive until stop says enough (nil: all of them) or ctx ends.
// Calls still running then carry on in the background until they finish or
// deadline passes: an acquire or extend that has its quorum still lands on
// the slower servers, so the lease does not hang on a bare quorum that the
// loss of one more server would end. Every call is counted in running, which
// Redlock.Close waits for.
func gather[T any](ctx context.Context, deadline time.Time, running *sync.WaitGroup, stores []*Store,
	call func(context.Context, *Store) (T, error), stop func([]outcome[T]) bool) []outcome[T] {
	callCtx, cancel := context.WithDeadline(context.WithoutCancel(ctx), deadline)
	ch := make(chan outcome[T], len(stores))
	var calls sync.WaitGroup
	for _, s := range stores {
		running.Add(1)
		calls.Go(func() {
			defer running.Done()
			v, err := call(callCtx, s)
			ch <- outcome[T]{v, err}
		})
	}
	go func() {
		calls.Wait()
		cancel()
	}()
	got := make([]outcome[T], 0, len(stores))
	for len(got) < len(stores) {
		select {
		case o := <-ch:
			got = append(got, o)
			if stop != nil && stop(got) {
				return got
			}
		case <-ctx.Done():
			return got
		}
	}
	return got
}

// deadlineOf returns ctx's deadline, or d from now if it has none.
func deadlineOf(ctx context.Context, d time.Duration) time.Time {
	if dl, ok := ctx.Deadline(); ok {
		return dl
	}
	return time.Now().Add(d)
}

// tally counts the answers of n servers: yes, no (a definite no from the
// server) and failed (an error, or no answer yet).
func tally[T any](n int, got []outcome[T], ok func(T) bool) (yes, no, failed int, errs []error) {
	for _, o := range got {
		switch {
		case o.err != nil:
			errs = append(errs, o.err)
		case ok(o.v):
			yes++
		default:
			no++
		}
	}
	if missing := n - len(got); missing > 0 {
		errs = append(errs, fmt.Errorf("%d servers did not answer in time", missing))
	}
	return yes, no, n - yes - no, errs
}

// decided returns a stop function for gather over n servers: stop once a
// quorum said yes or can no longer say yes.
func decided[T any](n, quorum int, ok func(T) bool) func([]outcome[T]) bool {
	return func(got []outcome[T]) bool {
		yes, no, _, _ := tally(len(got), got, ok)
		failed := len(got) - yes - no
		return yes >= quorum || no+failed > n-quorum
	}
}

type reservation struct {
	store  *Store
	ok     bool
	token  int64
	holder fence.Holder
}

func (r reservation) granted() bool { return r.ok }

// TryAcquire implements fence.Driver with Redlock's two phases.
func (r *Redlock) TryAcquire(ctx context.Context, req fence.Request) (_ fence.Claim, err error) {
	defer markUnavailable(&err)
	start := time.Now()
	deadline := start.Add(req.TTL - drift(req.TTL))
	phaseCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	n := len(r.stores)

	// Phase 1: take the lock and collect the proposed tokens. Once the
	// attempt is abandoned, or its lease released, a server that grants
	// it late (after the quorum, as a slow server does) lets go again.
	value := lockValue(attemptValue(req.Owner), req.Meta)
	abandoned := new(atomic.Bool)
	got := gather(phaseCtx, deadline, &r.running, r.stores, func(ctx context.Context, s *Store) (reservation, error) {
		var res reservation
		var err error
		if req.LockDelay > 0 {
			res, err = s.reserveDelayed(ctx, req.Key, value, req.TTL, req.LockDelay)
		} else {
			res, err = s.reserve(ctx, req.Key, value, req.TTL)
		}
		if err == nil && res.ok && abandoned.Load() {
			_ = s.dropAttempt(ctx, req, value)
		}
		return res, err
	}, decided(n, r.quorum, reservation.granted))
	yes, _, failed, errs := tally(n, got, reservation.granted)
	if yes < r.quorum {
		abandoned.Store(true)
		r.rollback(ctx, req, value)
		if failed > n-r.quorum {
			return nil, r.noQuorum("acquire", req.Key, yes, errs)
		}
		var hs []fence.Holder
		for _, o := range got {
			if o.err == nil && !o.v.ok {
				hs = append(hs, o.v.holder)
			}
		}
		h, _ := combine(req.Key, hs, r.quorum)
		return nil, &fence.HeldError{Key: req.Key, Holder: &h}
	}
	var token int64
	var holders []*Store
	for _, o := range got {
		if o.err == nil && o.v.ok {
			token = max(token, o.v.token)
			holders = append(holders, o.v.store)
		}
	}

	// Phase 2: raise a quorum's counters to the chosen token.
	raised := gather(phaseCtx, deadline, &r.running, holders, func(ctx context.Context, s *Store) (bool, error) {
		return s.raise(ctx, req.Key, value, token, req.TTL)
	}, decided(len(holders), r.quorum, isTrue))
	yes, _, _, errs = tally(len(holders), raised, isTrue)
	if yes < r.quorum {
		abandoned.Store(true)
		r.rollback(ctx, req, value)
		return nil, r.noQuorum("acquire", req.Key, yes, errs)
	}
	if elapsed := time.Since(start); elapsed >= req.TTL-drift(req.TTL) {
		abandoned.Store(true)
		r.rollback(ctx, req, value)
		return nil, fmt.Errorf("%w: acquire %q took %v, past the lease's validity", ErrNoQuorum, req.Key, elapsed)
	}
	return &redlockClaim{r: r, key: req.Key, value: value, token: token, abandoned: abandoned, delay: req.LockDelay}, nil
}

func isTrue(b bool) bool { return b }

func (r *Redlock) noQuorum(op, key string, yes int, errs []error) error {
	return fmt.Errorf("%w: %s %q: %d of %d servers agreed, %d needed: %w",
		ErrNoQuorum, op, key, yes, len(r.stores), r.quorum, errors.Join(errs...))
}

// rollback deletes a failed acquisition's locks on every server
// (compare-and-delete: servers where it did not get the lock are
// untouched), waiting at most the TTL, after which they expire anyway.
func (r *Redlock) rollback(ctx context.Context, req fence.Request, value string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), req.TTL)
	defer cancel()
	gather(ctx, time.Now().Add(req.TTL), &r.running, r.stores, func(ctx context.Context, s *Store) (struct{}, error) {
		return struct{}{}, s.dropAttempt(ctx, req, value)
	}, nil)
}

// dropAttempt deletes the lock of an acquisition attempt that never
// became a lease on one server; with a lock-delay, its until name too.
func (s *Store) dropAttempt(ctx context.Context, req fence.Request, value string) error {
	if req.LockDelay > 0 {
		_, err := s.dropLock(ctx, req.Key, value)
		return err
	}
	return s.release(ctx, req.Key, value)
}

// attemptValue is the owner part of what one acquisition attempt stores
// as the lock's value on every server (lockValue): the owner and a random
// nonce. The Client retries a
// waiting acquisition with the same owner; with the nonce, a late rollback
// or a late grant of one attempt can never touch the lock of the next.
// Holders are reported with the owner alone (ownerOf).
func attemptValue(owner string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return owner + attemptSep + hex.EncodeToString(b[:])
}

type redlockClaim struct {
	r     *Redlock
	key   string
	value string // the attempt's lock value
	token int64
	// abandoned is set on release, so that a server whose grant of the
	// acquisition arrives after the release lets go at once rather than
	// hold the key until the TTL.
	abandoned *atomic.Bool
	delay     time.Duration // the lease's lock-delay; 0: none
}

func (c *redlockClaim) Token() int64 { return c.token }

// Extend is compare-and-PEXPIRE on every server; a quorum must agree.
func (c *redlockClaim) Extend(ctx context.Context, ttl time.Duration) error {
	r, n := c.r, len(c.r.stores)
	got := gather(ctx, deadlineOf(ctx, ttl), &r.running, r.stores, func(ctx context.Context, s *Store) (bool, error) {
		if c.delay > 0 {
			return s.extendDelayedLock(ctx, c.key, c.value, ttl, c.delay)
		}
		return notHeldIsFalse(s.extend(ctx, c.key, c.value, ttl))
	}, decided(n, r.quorum, isTrue))
	yes, no, _, errs := tally(n, got, isTrue)
	switch {
	case yes >= r.quorum:
		return nil
	case no > n-r.quorum:
		return fmt.Errorf("%w: %q is held by %s on %d of %d servers, fewer than a quorum of %d",
			fence.ErrNotHeld, c.key, ownerOf(c.value), n-no, n, r.quorum)
	}
	return r.noQuorum("extend", c.key, yes, errs)
}

// Release is compare-and-DEL on every server. It returns once a quorum
// released (the rest carry on in the background).
func (c *redlockClaim) Release(ctx context.Context) error {
	if c.delay > 0 {
		return c.releaseDelayed(ctx)
	}
	r, n := c.r, len(c.r.stores)
	// Before the releases are sent: a late grant either sees the flag and
	// lets go itself, or landed before this release reaches its server.
	c.abandoned.Store(true)
	got := gather(ctx, deadlineOf(ctx, time.Minute), &r.running, r.stores, func(ctx context.Context, s *Store) (bool, error) {
		return notHeldIsFalse(s.release(ctx, c.key, c.value))
	}, decided(n, r.quorum, isTrue))
	yes, no, _, errs := tally(n, got, isTrue)
	switch {
	case yes >= r.quorum:
		return nil
	case no > n-r.quorum:
		return fmt.Errorf("%w: %q was held by %s on %d of %d servers, fewer than a quorum of %d",
			fence.ErrNotHeld, c.key, ownerOf(c.value), yes, n, r.quorum)
	}
	return r.noQuorum("release", c.key, yes, errs)
}

func notHeldIsFalse(err error) (bool, error) {
	if errors.Is(err, fence.ErrNotHeld) {
		return false, nil
	}
	return err == nil, err
}

// Inspect implements fence.Inspector: the owner that a quorum of servers
// name, with the highest token among them and the time until fewer than a
// quorum would hold it.
func (r *Redlock) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	got := gather(ctx, deadlineOf(ctx, time.Minute), &r.running, r.stores, func(ctx context.Context, s *Store) (fence.Holder, error) {
		h, err := s.Inspect(ctx, key)
		if errors.Is(err, fence.ErrNotHeld) {
			return fence.Holder{}, nil
		}
		return h, err
	}, nil)
	var hs []fence.Holder
	var errs []error
	for _, o := range got {
		if o.err != nil {
			errs = append(errs, o.err)
		} else if o.v.Owner != "" {
			hs = append(hs, o.v)
		}
	}
	if h, ok := combine(key, hs, r.quorum); ok {
		return h, nil
	}
	if len(errs) > len(r.stores)-r.quorum {
		return fence.Holder{}, r.noQuorum("inspect", key, len(r.stores)-len(errs), errs)
	}
	return fence.Holder{}, fmt.Errorf("%w: %q is not held on a quorum of servers", fence.ErrNotHeld, key)
}

// List implements fence.Lister: Store.List on every server (a SCAN of each
// whole keyspace), keeping the keys a quorum agree on.
func (r *Redlock) List(ctx context.Context, prefix string) ([]fence.Holder, error) {
	got := gather(ctx, deadlineOf(ctx, time.Minute), &r.running, r.stores, func(ctx context.Context, s *Store) ([]fence.Holder, error) {
		return s.List(ctx, prefix)
	}, nil)
	byKey := make(map[string][]fence.Holder)
	var errs []error
	for _, o := range got {
		if o.err != nil {
			errs = append(errs, o.err)
			continue
		}
		for _, h := range o.v {
			byKey[h.Key] = append(byKey[h.Key], h)
		}
	}
	if len(errs) > len(r.stores)-r.quorum {
		return nil, r.noQuorum("list", prefix, len(r.stores)-len(errs), errs)
	}
	var out []fence.Holder
	for key, hs := range byKey {
		if h, ok := combine(key, hs, r.quorum); ok {
			out = append(out, h)
		}
	}
	slices.SortFunc(out, func(a, b fence.Holder) int { return cmp.Compare(a.Key, b.Key) })
	return out, nil
}

// combine sums up what several servers say about key's holder: the owner
// named most often, the highest token it has, and (if a quorum name it)
// the time until fewer than a quorum hold it, else the time until the
// first server lets go. ok reports whether a quorum name the owner.
func combine(key string, hs []fence.Holder, quorum int) (h fence.Holder, ok bool) {
	h.Key = key
	count := make(map[string]int)
	for _, x := range hs {
		count[x.Owner]++
		if count[x.Owner] > count[h.Owner] || h.Owner == "" {
			h.Owner = x.Owner
		}
	}
	var ttls []time.Duration
	for _, x := range hs {
		if x.Owner != h.Owner {
			continue
		}
		h.Token = max(h.Token, x.Token)
		if h.Meta == nil {
			h.Meta = x.Meta
		}
		ttls = append(ttls, x.ExpiresIn)
	}
	slices.Sort(ttls)
	if ok = len(ttls) >= quorum; ok {
		h.ExpiresIn = ttls[len(ttls)-quorum]
	} else if len(ttls) > 0 {
		h.ExpiresIn = ttls[0]
	}
	return h, ok
}

// Watch implements fence.Watcher: it subscribes to the key's release
// channel on every server and returns once a quorum of subscriptions are
// in effect, or, failing that, once every server has answered and at least
// one subscription is. A release is announced on every server that held
// the lock, so subscriptions on a quorum are sure to hear it; with fewer,
// the Client's polling covers what is missed. Subscriptions on slow
// servers carry on in the background until ctx is done.
func (r *Redlock) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	results := make(chan error, len(r.stores))
	for _, s := range r.stores {
		go func() { results <- s.hub.watch(ctx, s.names(key).channel, ch) }()
	}
	var ok int
	var errs []error
	for range r.stores {
		if err := <-results; err != nil {
			errs = append(errs, err)
		} else if ok++; ok >= r.quorum {
			return ch, nil
		}
	}
	if ok == 0 {
		return nil, fmt.Errorf("fenceredis: watch %q: no server: %w", key, errors.Join(errs...))
	}
	return ch, nil
}

// reserve is phase 1 on one server.
func (s *Store) reserve(ctx context.Context, key, value string, ttl time.Duration) (reservation, error) {
	reply, err := reserveScript.Run(ctx, s.rdb, s.names(key).keys(), value, ms(ttl)).Result()
	if err != nil {
		return reservation{}, fmt.Errorf("fenceredis: reserve %q: %w", key, err)
	}
	token, holder, ok, err := granted(key, reply)
	if err != nil {
		return reservation{}, fmt.Errorf("fenceredis: reserve %q: %w", key, err)
	}
	return reservation{store: s, ok: ok, token: token, holder: holder}, nil
}

// raise is phase 2 on one server; false if it no longer holds the lock.
func (s *Store) raise(ctx context.Context, key, value string, token int64, ttl time.Duration) (bool, error) {
	ok, err := raiseScript.Run(ctx, s.rdb, s.names(key).keys(), value, token, ms(ttl+s.retention)).Int()
	if err != nil {
		return false, fmt.Errorf("fenceredis: raise token of %q: %w", key, err)
	}
	return ok == 1, nil
}
