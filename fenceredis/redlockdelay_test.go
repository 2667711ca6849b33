package fenceredis

import (
	"errors"
	"testing"
	"time"

	"github.com/fencing/fence"
)

// A Redlock lease with a lock-delay that lost its quorum while one
// server still holds it live: the lost holder's late Release must not
// free that server, or a quorum of servers would be free before the
// delay after the lease lost its quorum. Ends by the servers' clocks,
// from the create: C at the TTL, B later (an extend that reached A and
// B), A later still (an extend that reached A alone); the lease lost its
// quorum at B's end, so the key is blocked until B's end plus the delay,
// past C's end plus the delay.
func TestRedlockLockDelayLateRelease(t *testing.T) {
	ctx := testCtx(t)
	_, connect, _ := redlockSetup(t, 3)
	r := mustOpen(t, connect).(*Redlock)
	const delay = 3 * time.Second
	start := time.Now()
	cl, err := r.TryAcquire(ctx, fence.Request{Key: "k", Owner: "lost", TTL: time.Second, LockDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	c := cl.(*redlockClaim)
	r.running.Wait()
	extend := func(at, ttl time.Duration, servers ...int) {
		t.Helper()
		time.Sleep(time.Until(start.Add(at)))
		for _, i := range servers {
			if ok, err := r.stores[i].extendDelayedLock(ctx, "k", c.value, ttl, delay); !ok || err != nil {
				t.Fatalf("extend on server %d: %v, %v", i, ok, err)
			}
		}
	}
	extend(500*time.Millisecond, 1500*time.Millisecond, 0, 1)  // A, B end at 2s
	extend(1200*time.Millisecond, 3*time.Second, 0)            // A ends at 4.2s
	time.Sleep(time.Until(start.Add(2500 * time.Millisecond))) // C, B ended: no quorum
	if err := c.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("late Release with the lease live on one server of three: %v; want ErrNotHeld", err)
	}
	if err := c.Extend(ctx, time.Second); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("late Extend: %v; want ErrNotHeld", err)
	}
	// Past C's end plus the delay (4s), before B's (5s).
	time.Sleep(time.Until(start.Add(4500 * time.Millisecond)))
	if time.Since(start) > 4900*time.Millisecond {
		t.Skipf("too slow to check within the delay (%v)", time.Since(start))
	}
	_, err = r.TryAcquire(ctx, fence.Request{Key: "k", Owner: "next", TTL: time.Second})
	var held *fence.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("TryAcquire %v after the create, within the delay after the lease lost its quorum: %v; want a *HeldError",
			time.Since(start), err)
	}
	h, err := r.Inspect(ctx, "k")
	if err != nil || h.Owner != "lost" || h.ExpiresIn <= 0 || h.ExpiresIn > time.Second {
		t.Errorf("Inspect within the delay: %+v, %v; want the lost holder, free within a second", h, err)
	}
	client := mustClient(t, r, fence.WithTTL(time.Second))
	l, err := client.Acquire(ctx, "k", fence.WithWait(5*time.Second))
	if err != nil {
		t.Fatalf("not free after the delay: %v", err)
	}
	if free := time.Since(start); free < 5*time.Second {
		t.Errorf("free %v after the create; want no sooner than B's end plus the delay, 5s", free)
	}
	if err := l.Release(ctx); err != nil {
		t.Error(err)
	}
}
