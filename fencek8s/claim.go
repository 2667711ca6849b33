package fencek8s

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/fencing/fence"
)

// claim is one granted lease: the Lease as we last wrote it.
type claim struct {
	d     *Store
	key   string
	owner string
	token int64
	lease *coordinationv1.Lease
	delay bool      // the lease has a lock-delay
	until time.Time // the lease's end: the TTL from sending the last write that landed
}

// newClaim returns the claim of req's lease, granted with tok by a write
// that made l, sent at sent.
func (d *Store) newClaim(req fence.Request, tok int64, l *coordinationv1.Lease, sent time.Time) *claim {
	return &claim{d: d, key: req.Key, owner: req.Owner, token: tok, lease: l,
		delay: req.Kind == fence.KindLock && req.LockDelay > 0, until: sent.Add(req.TTL)}
}

// ended returns an error matching fence.ErrNotHeld if the lease has a
// lock-delay and has ended: a renewal or a release now would cut the delay
// short for a contender that has watched the Lease for its duration.
func (c *claim) ended() error {
	if !c.delay || time.Now().Before(c.until) || testHookDelay == "release-after-end" {
		return nil
	}
	return fmt.Errorf("%w: %q (token %d): the lease ended; its lock-delay runs on", fence.ErrNotHeld, c.key, c.token)
}

// Token implements fence.Claim: base + leaseTransitions of our acquisition.
func (c *claim) Token() int64 { return c.token }

// Extend implements fence.Claim: it writes renewTime again, conditioned on
// the resourceVersion of our last write.
func (c *claim) Extend(ctx context.Context, ttl time.Duration) error {
	secs, err := durationSeconds(ttl)
	if err != nil {
		return err
	}
	if err := c.ended(); err != nil {
		return err
	}
	return c.write(ctx, "extend", ttl, func(l *coordinationv1.Lease) {
		now := metav1.NowMicro()
		l.Spec.RenewTime = &now
		l.Spec.LeaseDurationSeconds = ptr(secs)
	})
}

// Release implements fence.Claim: it clears holderIdentity as client-go's
// elector does on release, conditioned like Extend. The Lease stays, with
// its token counter.
func (c *claim) Release(ctx context.Context) error {
	if err := c.ended(); err != nil {
		return err
	}
	return c.write(ctx, "release", 0, func(l *coordinationv1.Lease) { released(l) })
}

// write updates our last version of the Lease with change. If someone
// wrote the Lease since, or our last write went through though its reply
// was lost, it reads the Lease and tries once more if it still names this
// owner with this token. A write that lands moves the lease's end to ttl
// from the sending of the first try.
func (c *claim) write(ctx context.Context, op string, ttl time.Duration, change func(*coordinationv1.Lease)) error {
	sent := time.Now()
	for adopted := false; ; adopted = true {
		l := c.lease.DeepCopy()
		change(l)
		got, err := c.d.leases.Update(ctx, l, metav1.UpdateOptions{})
		switch {
		case err == nil:
			c.lease, c.until = got, sent.Add(ttl)
			return nil
		case apierrors.IsNotFound(err):
			return fmt.Errorf("%w: %q (token %d): its Lease was deleted", fence.ErrNotHeld, c.key, c.token)
		case !apierrors.IsConflict(err):
			return fmt.Errorf("fencek8s: %s %q: %w", op, c.key, err)
		case adopted:
			return fmt.Errorf("%w: %q (token %d) was written by someone else", fence.ErrNotHeld, c.key, c.token)
		}
		cur, err := c.d.leases.Get(ctx, c.lease.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return fmt.Errorf("%w: %q (token %d): its Lease was deleted", fence.ErrNotHeld, c.key, c.token)
		case err != nil:
			return fmt.Errorf("fencek8s: %s %q: %w", op, c.key, err)
		case holderOf(cur) != c.owner || token(cur) != c.token:
			return fmt.Errorf("%w: %q (token %d) now held by %q", fence.ErrNotHeld, c.key, c.token, holderOf(cur))
		}
		c.lease = cur
	}
}
