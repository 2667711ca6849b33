package fencetest

import (
	"errors"
	"testing"
	"time"

	"github.com/fencing/fence"
)

// sessionLoss kills the holder's session in the store (Store.KillSession)
// for a lock, a semaphore slot and a reader: the holder's lease must end
// promptly, through the driver's report of the session's end (LossSession),
// not a failed renewal or the end of its validity; and the key, or the
// slot, goes to the waiting contender with a greater token.
func (s *suite) sessionLoss(t *testing.T) {
	if s.store.KillSession == nil {
		t.Skip("Store.KillSession not given: leases are not bound to a session in the store")
	}
	drv := s.driver(t)
	t.Run("killed-before-registration", func(t *testing.T) { s.lossBeforeRegistration(t, drv) })
	for _, k := range kinds(drv) {
		if k == fence.KindWrite {
			continue // a reader's loss frees the key for a writer: both sides are seen
		}
		t.Run(k.String(), func(t *testing.T) {
			ctx := s.ctx(t)
			a, b := s.client(t), s.client(t)
			key := s.key(t, "k")
			// A long TTL without renewal, where the driver takes it, so
			// that only the session's end can end the lease soon.
			ttl := 10 * s.cfg.TTL
			l, err := acquireKind(ctx, a, key, k, false, fence.WithTTL(ttl), fence.WithoutRenewal())
			if errors.Is(err, fence.ErrInvalidTTL) {
				ttl = s.cfg.TTL
				l, err = acquireKind(ctx, a, key, k, false, fence.WithoutRenewal())
			}
			if err != nil {
				t.Fatalf("TryAcquire: %v", err)
			}
			// The contender: a writer behind a reader, else the same kind.
			wk := blocker(k)
			type grant struct {
				l  *fence.Lease
				at time.Time
			}
			got := make(chan grant, 1)
			go func() {
				l2, err := acquireKind(ctx, b, key, wk, true, fence.WithWait(ttl+s.slack()))
				if err != nil {
					t.Errorf("contender (%s): %v", wk, err)
				}
				got <- grant{l2, time.Now()}
			}()
			time.Sleep(s.cfg.TTL / 10) // let the contender start waiting
			killed := time.Now()
			if err := s.store.KillSession(ctx, key, k); err != nil {
				t.Fatalf("Store.KillSession(%q, %s): %v", key, k, err)
			}
			// Prompt: well before the lease's validity would end it.
			prompt := ttl * 3 / 4
			select {
			case <-l.Done():
				t.Logf("loss noticed %v after the session was killed", time.Since(killed).Round(time.Millisecond))
			case <-time.After(prompt):
				t.Errorf("lease still valid %v after its session was killed in the store (TTL %v): loss must be prompt, well under a TTL",
					prompt, ttl)
			}
			var lost *fence.LostError
			if err := l.Err(); !errors.As(err, &lost) || lost.Reason != fence.LossSession {
				t.Errorf("cause of the loss: %v; want a *LostError with reason %q (the driver reports the session's end)", err, fence.LossSession)
			}
			select {
			case g := <-got:
				if g.l == nil {
					break
				}
				took := g.at.Sub(killed)
				t.Logf("contender got the key %v after the kill", took.Round(time.Millisecond))
				if took > prompt {
					t.Errorf("the contender got the key only %v after the holder's session was killed (TTL %v): it must be freed at once", took, ttl)
				}
				if g.l.Token() <= l.Token() {
					t.Errorf("contender's token %d is not greater than the killed holder's %d", g.l.Token(), l.Token())
				}
				mustRelease(t, ctx, g.l)
			case <-time.After(prompt - time.Since(killed)):
				t.Errorf("the contender did not get the key %v after the holder's session was killed (TTL %v): it must be freed at once",
					time.Since(killed).Round(time.Millisecond), ttl)
				if g := <-got; g.l != nil {
					mustRelease(t, ctx, g.l)
				}
			}
			if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
				t.Errorf("Release of the lease whose session was killed: %v; want ErrLost", err)
			}
			// The driver whose session was killed carries on, with a new
			// session.
			l3, err := acquireKind(ctx, a, key, k, true, fence.WithWait(s.slack()))
			if err != nil {
				t.Fatalf("Acquire on the client whose session was killed: %v", err)
			}
			if l3.Token() <= l.Token() {
				t.Errorf("token %d after the killed holder's %d", l3.Token(), l.Token())
			}
			mustRelease(t, ctx, l3)
		})
	}
}

// lossBeforeRegistration kills a driver-level claim's session before
// anyone listens for its loss: the driver must still report it, to the
// function registered afterwards (SessionClaim.NotifyLost: "at once if it
// was gone already"). The Client registers right after the grant, so
// only a kill in between takes this path; here it is taken on purpose.
func (s *suite) lossBeforeRegistration(t *testing.T, drv fence.Driver) {
	ctx := s.ctx(t)
	key := s.key(t, "k")
	c, err := drv.TryAcquire(ctx, s.request(key, fence.KindLock))
	if err != nil {
		t.Fatalf("driver TryAcquire: %v", err)
	}
	defer func() { _ = c.Release(ctx) }()
	sc, ok := c.(fence.SessionClaim)
	if !ok {
		t.Fatalf("the driver's claim (%T) is not a fence.SessionClaim, though Store.KillSession is given", c)
	}
	if err := s.store.KillSession(ctx, key, fence.KindLock); err != nil {
		t.Fatalf("Store.KillSession(%q): %v", key, err)
	}
	time.Sleep(s.cfg.TTL / 4) // time for the driver to learn of it first
	reported := make(chan error, 1)
	sc.NotifyLost(func(cause error) {
		select {
		case reported <- cause:
		default:
		}
	})
	select {
	case cause := <-reported:
		if cause == nil {
			t.Errorf("the loss of a killed session was reported with a nil cause")
		}
	case <-time.After(s.slack()):
		t.Errorf("a session killed before its loss function was registered was never reported: a driver must report a loss that came first, at once")
	}
}

// stateLoss wipes everything the store keeps for a free key (Store.Wipe),
// counters included, in every kind: the next tokens must still be greater
// than every earlier one.
func (s *suite) stateLoss(t *testing.T) {
	if s.store.Wipe == nil {
		t.Skip("Store.Wipe not given")
	}
	ctx := s.ctx(t)
	a := s.client(t)
	key := s.key(t, "k")
	ks := kinds(a.Driver())
	last := map[fence.Kind]int64{}
	for _, k := range ks {
		for range 3 {
			l, err := acquireKind(ctx, a, key, k, false)
			if err != nil {
				t.Fatalf("%s: TryAcquire: %v", k, err)
			}
			last[k] = l.Token()
			mustRelease(t, ctx, l)
		}
	}
	if err := s.store.Wipe(ctx, key); err != nil {
		t.Fatalf("Store.Wipe(%q): %v", key, err)
	}
	b := s.client(t) // a new driver, as after a restart
	for _, k := range ks {
		l, err := acquireKind(ctx, b, key, k, true, fence.WithWait(s.slack()))
		if err != nil {
			t.Errorf("%s: Acquire after the store lost the key: %v", k, err)
			continue
		}
		if l.Token() <= last[k] {
			t.Errorf("%s: token %d after the store lost its record of the key; want above the earlier %d: state loss must never send tokens back",
				k, l.Token(), last[k])
		}
		mustRelease(t, ctx, l)
	}
}
