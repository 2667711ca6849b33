package fencetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fencing/fence"
)

// expectFree checks that key is free, by taking it with c and letting it
// go.
func expectFree(t *testing.T, ctx context.Context, c *fence.Client, key, why string) {
	t.Helper()
	l, err := c.TryAcquire(ctx, key)
	if err != nil {
		t.Errorf("%s: TryAcquire(%q): %v; want the key free", why, key, err)
		return
	}
	mustRelease(t, ctx, l)
}

// multi checks AcquireAll on every driver, and the driver's own atomic
// step where it is a MultiAcquirer: every key or none, each with its own
// token, and no deadlock between overlapping sets taken in different
// orders.
func (s *suite) multi(t *testing.T) {
	ctx := s.ctx(t)
	a, b := s.client(t), s.client(t)
	keys := []string{s.key(t, "c"), s.key(t, "a"), s.key(t, "b")}
	held := keys[2]

	set, err := a.AcquireAll(ctx, keys)
	if err != nil {
		t.Fatalf("AcquireAll(%q): %v", keys, err)
	}
	first := map[string]int64{}
	for _, l := range set.Leases() {
		first[l.Key()] = l.Token()
		expectHeld(t, ctx, b, l.Key(), "AcquireAll granted it")
	}
	if len(first) != len(keys) {
		t.Errorf("AcquireAll returned %d leases for %d keys", len(first), len(keys))
	}
	if err := set.Release(ctx); err != nil {
		t.Errorf("LeaseSet.Release: %v", err)
	}

	third := mustAcquire(t, ctx, b, held)
	_, err = a.TryAcquireAll(ctx, keys)
	var he *fence.HeldError
	if !errors.As(err, &he) || he.Key != held {
		t.Errorf("TryAcquireAll with %q held: %v; want its *HeldError", held, err)
	}
	for _, k := range keys {
		if k != held {
			expectFree(t, ctx, b, k, "TryAcquireAll found another key held (all or none)")
		}
	}

	if m, ok := a.Driver().(fence.MultiAcquirer); ok {
		s.multiAtomic(t, ctx, m, b, keys, held, first)
	}
	mustRelease(t, ctx, third)
	s.multiOverlap(t, ctx)
}

// multiAtomic checks the driver's TryAcquireAll itself, with held held by
// another owner; first holds the tokens of an earlier grant of keys.
func (s *suite) multiAtomic(t *testing.T, ctx context.Context, m fence.MultiAcquirer, other *fence.Client, keys []string, held string, first map[string]int64) {
	sorted := slices.Sorted(slices.Values(keys))
	reqs := func() []fence.Request {
		rs := make([]fence.Request, len(sorted))
		for i, k := range sorted {
			rs[i] = fence.Request{Key: k, Owner: "fencetest-multi-" + randomHex(8), TTL: s.cfg.TTL}
		}
		return rs
	}
	claims, err := m.TryAcquireAll(ctx, reqs())
	if errors.Is(err, fence.ErrUnsupported) {
		t.Logf("the driver does not take these keys in one step: %v", err)
		return
	}
	var he *fence.HeldError
	if !errors.As(err, &he) || he.Key != held || claims != nil {
		t.Errorf("driver TryAcquireAll with %q held: %d claims, %v; want no claim and its *HeldError", held, len(claims), err)
		for _, c := range claims {
			_ = c.Release(ctx)
		}
	}
	for _, k := range keys {
		if k != held {
			expectFree(t, ctx, other, k, "driver TryAcquireAll refused, yet took a key (all or none)")
		}
	}
	t.Run("Grant", func(t *testing.T) {
		// The held key is still held here: take the others only.
		var rs []fence.Request
		for _, r := range reqs() {
			if r.Key != held {
				rs = append(rs, r)
			}
		}
		claims, err := m.TryAcquireAll(ctx, rs)
		if err != nil {
			t.Fatalf("driver TryAcquireAll of free keys: %v", err)
		}
		if len(claims) != len(rs) {
			t.Fatalf("driver TryAcquireAll returned %d claims for %d keys (all or none)", len(claims), len(rs))
		}
		for i, c := range claims {
			if c.Token() <= first[rs[i].Key] {
				t.Errorf("claim of %q: token %d, not greater than the earlier %d", rs[i].Key, c.Token(), first[rs[i].Key])
			}
			expectHeld(t, ctx, other, rs[i].Key, "driver TryAcquireAll granted it")
		}
		for i, c := range claims {
			if err := c.Release(ctx); err != nil {
				t.Errorf("Release of the claim of %q: %v", rs[i].Key, err)
			}
			expectFree(t, ctx, other, rs[i].Key, "its claim was released")
		}
	})
}

// multiOverlap has clients take overlapping sets in opposite orders at
// once, again and again: none may deadlock, and no key is ever held by
// two.
func (s *suite) multiOverlap(t *testing.T, ctx context.Context) {
	x, y := s.key(t, "x"), s.key(t, "y")
	const rounds = 5
	var (
		mu     sync.Mutex
		inside = map[string]int{}
		wg     sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(ctx, 2*rounds*s.slack())
	defer cancel()
	for i, keys := range [][]string{{x, y}, {y, x}, {y, x}} {
		c := s.client(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				set, err := c.AcquireAll(ctx, keys)
				if err != nil {
					t.Errorf("caller %d round %d: AcquireAll(%q): %v (deadlocked?)", i, r, keys, err)
					return
				}
				mu.Lock()
				for _, k := range keys {
					if inside[k]++; inside[k] > 1 {
						t.Errorf("%q held by two callers at once", k)
					}
				}
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				for _, k := range keys {
					inside[k]--
				}
				mu.Unlock()
				if err := set.Release(ctx); err != nil {
					t.Errorf("caller %d: LeaseSet.Release: %v", i, err)
				}
			}
		}()
	}
	wg.Wait()
}

// lockDelay checks WithLockDelay where the driver keeps it: a key whose
// lease ended without a release stays blocked for the delay after the
// store noticed, for everyone, and no longer; a released key is free at
// once. Elsewhere the Client must refuse the option.
func (s *suite) lockDelay(t *testing.T) {
	ctx := s.ctx(t)
	a, b := s.client(t), s.client(t)
	key := s.key(t, "k")
	delay := 2 * s.cfg.TTL
	if ld, ok := a.Driver().(fence.LockDelayer); !ok || !ld.SupportsLockDelay(fence.KindLock) {
		if _, err := a.TryAcquire(ctx, key, fence.WithLockDelay(delay)); !errors.Is(err, fence.ErrUnsupported) {
			t.Errorf("WithLockDelay on a driver that does not keep it: %v; want ErrUnsupported", err)
		}
		t.Skip("driver does not keep a lock-delay")
	}
	if s.cfg.SessionBound && s.store.KillSession == nil {
		t.Skip("no Store.KillSession to end a session-bound lease uncleanly")
	}

	l := mustAcquire(t, ctx, a, key, fence.WithLockDelay(delay))
	mustRelease(t, ctx, l)
	expectFree(t, ctx, b, key, "released under a lock-delay")

	start := time.Now()
	l = mustAcquire(t, ctx, a, key, fence.WithLockDelay(delay), fence.WithoutRenewal())
	// A second lease, lost the same way, is broken within its delay.
	key2 := s.key(t, "broken")
	var l2 *fence.Lease
	if _, ok := a.Driver().(fence.Breaker); ok {
		l2 = mustAcquire(t, ctx, a, key2, fence.WithLockDelay(delay), fence.WithoutRenewal())
	}
	var noticed time.Time // no later than the store noticed the loss
	if s.cfg.SessionBound {
		noticed = time.Now()
		if err := s.store.KillSession(ctx, key, fence.KindLock); err != nil {
			t.Fatalf("KillSession: %v", err)
		}
		if l2 != nil {
			if err := s.store.KillSession(ctx, key2, fence.KindLock); err != nil {
				t.Fatalf("KillSession: %v", err)
			}
		}
	} else {
		noticed = start.Add(s.cfg.TTL)
	}
	select {
	case <-l.Done():
	case <-time.After(s.cfg.TTL + s.slack()):
		t.Fatal("lease not lost")
	}
	time.Sleep(time.Until(noticed.Add(delay / 2)))
	// The lease has ended (delay/2 past its end in the store, well
	// beyond any drift): a resume may neither revive it nor lift the
	// delay.
	if _, ok := a.Driver().(fence.Resumer); ok && !s.cfg.ContenderClock {
		if r, err := a.TryAcquire(ctx, key, fence.WithResume(l.Owner(), l.Token())); !errors.Is(err, fence.ErrNotHeld) {
			if err == nil {
				r.Release(ctx)
			}
			t.Errorf("resume of a lease that ended uncleanly, within its lock-delay: %v; want ErrNotHeld", err)
		}
	}
	if l2 != nil {
		// Breaking a lease in its lock-delay lifts the delay: the key is
		// free at once, with a greater token.
		broken, err := b.Break(ctx, key2, l2.Token())
		if err != nil || broken.Token != l2.Token() {
			t.Errorf("break of a lease in its lock-delay: %+v, %v; want the lost holder (token %d) broken", broken, err, l2.Token())
		} else if got, err := b.TryAcquire(ctx, key2); err != nil {
			t.Errorf("the key not free after its lease in its lock-delay was broken: %v", err)
		} else {
			if got.Token() <= l2.Token() {
				t.Errorf("token %d after the break, not greater than the broken holder's %d", got.Token(), l2.Token())
			}
			mustRelease(t, ctx, got)
		}
	}
	expectHeld(t, ctx, b, key, fmt.Sprintf("free within its lock-delay (%v after its lease ended uncleanly; delay %v)", time.Since(noticed), delay))
	got, err := b.Acquire(ctx, key, fence.WithWait(delay+s.slack()))
	if err != nil {
		t.Fatalf("the key not free after its lock-delay: %v", err)
	}
	// The store's clock may run a little faster than ours: allow for it
	// as the Client's drift margin does.
	if at, margin := time.Since(noticed), (s.cfg.TTL+delay)/50+5*time.Millisecond; at < delay-margin {
		t.Errorf("the key was free %v after its lease ended uncleanly; want no sooner than its lock-delay %v", at, delay)
	}
	if got.Token() <= l.Token() {
		t.Errorf("token %d after the delay, not greater than the lost holder's %d", got.Token(), l.Token())
	}
	mustRelease(t, ctx, got)
	if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
		t.Errorf("the lost holder's Release: %v; want ErrLost", err)
	}
}
