package fencek8s

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/metajson"
	"github.com/fencing/fence/internal/kit/unavail"
)

var (
	_ fence.Breaker = (*Store)(nil)
	_ fence.Resumer = (*Store)(nil)
)

// Break implements fence.Breaker: it reads key's Lease and, if it names
// a holder with token (any, for 0), clears the holder as a release does,
// in an update conditioned on the resourceVersion read: a write since
// (the holder's renewal, a new holder) makes it fail, and Break looks
// again. The Lease stays, with its token counter. A Lease this driver
// has seen unchanged for a full lease duration and lock-delay has
// expired: nothing to break; one in its lock-delay is freed.
func (d *Store) Break(ctx context.Context, key string, token int64) (fence.Holder, error) {
	name := Name(key)
	for attempt := 0; ; attempt++ {
		l, err := d.leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && holderOf(l) == "" {
			return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
		}
		if err != nil {
			return fence.Holder{}, fmt.Errorf("fencek8s: break %q: %w", key, err)
		}
		left, _, err := d.observe(l)
		if err != nil {
			return fence.Holder{}, fmt.Errorf("fencek8s: break %q: %w", key, err)
		}
		if left <= 0 {
			return fence.Holder{}, fmt.Errorf("%w: %q expired: unchanged for its lease duration and lock-delay", fence.ErrNotHeld, key)
		}
		h := d.holder(key, l, left)
		if token != 0 && h.Token != token {
			return fence.Holder{}, &fence.HeldError{Key: key, Holder: &h}
		}
		_, err = d.leases.Update(ctx, released(l.DeepCopy()), metav1.UpdateOptions{})
		if err == nil {
			d.forget(name)
			return h, nil
		}
		if !apierrors.IsConflict(err) || attempt == 5 {
			return fence.Holder{}, fmt.Errorf("fencek8s: break %q: %w", key, err)
		}
	}
}

// released is l with its holder cleared, as client-go's elector and
// Release clear it.
func released(l *coordinationv1.Lease) *coordinationv1.Lease {
	now := metav1.NowMicro()
	l.Spec.HolderIdentity = nil
	l.Spec.LeaseDurationSeconds = ptr(int32(1))
	l.Spec.RenewTime = &now
	delete(l.Annotations, AnnotationMeta)
	delete(l.Annotations, AnnotationLockDelay)
	return l
}

// Resume implements fence.Resumer: it reads key's Lease and, if it names
// req.Owner with tok and has not expired as this driver sees it (a lease
// in its lock-delay has), renews it (renewTime, duration, metadata,
// lock-delay) in an update conditioned on the resourceVersion read. Its
// errors that say the API server could not answer match
// fence.ErrUnavailable, as TryAcquire's.
func (d *Store) Resume(ctx context.Context, req fence.Request, tok int64) (_ fence.Claim, err error) {
	defer func() { err = unavail.Mark(err, unavailable) }()
	if req.Kind != fence.KindLock {
		return nil, fmt.Errorf("fencek8s: resume %q: %w: %s", req.Key, fence.ErrUnsupported, req.Kind)
	}
	secs, err := durationSeconds(req.TTL)
	if err != nil {
		return nil, err
	}
	name := Name(req.Key)
	for attempt := 0; ; attempt++ {
		l, err := d.leases.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) || err == nil && holderOf(l) == "" {
			return nil, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, req.Key)
		}
		if err != nil {
			return nil, fmt.Errorf("fencek8s: resume %q: %w", req.Key, err)
		}
		left, lease, err := d.observe(l)
		if err != nil {
			return nil, fmt.Errorf("fencek8s: resume %q: %w", req.Key, err)
		}
		if lease <= 0 {
			return nil, fmt.Errorf("%w: %q expired: unchanged for its lease duration", fence.ErrNotHeld, req.Key)
		}
		if holderOf(l) != req.Owner || token(l) != tok {
			return nil, &fence.HeldError{Key: req.Key, Holder: ptr(d.holder(req.Key, l, left))}
		}
		n := l.DeepCopy()
		now := metav1.NowMicro()
		n.Spec.RenewTime = &now
		n.Spec.LeaseDurationSeconds = ptr(secs)
		if n.Annotations == nil {
			n.Annotations = make(map[string]string)
		}
		if len(req.Meta) > 0 {
			n.Annotations[AnnotationMeta] = metajson.Encode(req.Meta)
		}
		// The lease keeps its lock-delay: a resume may lengthen it, never
		// drop it.
		had, err := lockDelay(l)
		if err != nil {
			return nil, fmt.Errorf("fencek8s: resume %q: %w", req.Key, err)
		}
		req.LockDelay = max(req.LockDelay, had)
		setLockDelay(n, req)
		sent := time.Now()
		got, err := d.leases.Update(ctx, n, metav1.UpdateOptions{})
		if err == nil {
			d.forget(name)
			return d.newClaim(req, tok, got, sent), nil
		}
		if !apierrors.IsConflict(err) || attempt == 5 {
			return nil, fmt.Errorf("fencek8s: resume %q: %w", req.Key, err)
		}
	}
}
