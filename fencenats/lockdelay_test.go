package fencenats_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencenats"
)

// A lease whose TTL ran out in the store is in its lock-delay: its
// Resume (a restarted holder), late Extend and Release (a paused holder
// waking up) are refused and leave the key blocked, Inspect shows it
// with the time until the key is free, and the key frees no sooner than
// the lease's end plus the delay.
func TestLockDelayLateReleaseKeepsBlock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := fencenats.Dial(ctx, startNATS(t).URL(), "fencetest")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const leaseTTL, delay = time.Second, 3 * time.Second
	sent := time.Now()
	c, err := d.TryAcquire(ctx, fence.Request{Key: "k", Owner: "lost", TTL: leaseTTL, LockDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	// Past the lease's end in the store, well within its delay.
	time.Sleep(time.Until(sent.Add(leaseTTL + delay/4)))
	resume := fence.Request{Key: "k", Owner: "lost", TTL: leaseTTL, LockDelay: delay}
	if _, err := d.Resume(ctx, resume, c.Token()); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Resume in the lock-delay: %v; want ErrNotHeld", err)
	}
	if err := c.Extend(ctx, leaseTTL); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Extend in the lock-delay: %v; want ErrNotHeld", err)
	}
	if err := c.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Release in the lock-delay: %v; want ErrNotHeld", err)
	}
	var held *fence.HeldError
	if _, err := d.TryAcquire(ctx, fence.Request{Key: "k", Owner: "next", TTL: leaseTTL}); !errors.As(err, &held) {
		t.Fatalf("TryAcquire after the lost holder's late Extend, Release and Resume, within the delay: %v; want a *HeldError", err)
	}
	h, err := d.Inspect(ctx, "k")
	if err != nil {
		t.Fatalf("Inspect in the lock-delay: %v", err)
	}
	// The key is free at the next whole second past TTL + delay after
	// the create (and no later than that plus one second for the
	// rewrite that put the block back).
	untilFree := time.Until(sent.Add(leaseTTL + delay))
	if h.Owner != "lost" || h.ExpiresIn < untilFree-100*time.Millisecond || h.ExpiresIn > untilFree+2*time.Second {
		t.Errorf("Inspect in the lock-delay: owner %q, ExpiresIn %v; want the lost holder, about %v", h.Owner, h.ExpiresIn, untilFree)
	}

	client := fence.New(d, fence.WithTTL(2*time.Second))
	l, err := client.Acquire(ctx, "k", fence.WithWait(delay+3*time.Second))
	if err != nil {
		t.Fatalf("the key not free after the delay: %v", err)
	}
	if free := time.Since(sent); free < leaseTTL+delay {
		t.Errorf("the key was free %v after the create; want no sooner than TTL + delay, %v", free, leaseTTL+delay)
	}
	if err := l.Release(ctx); err != nil {
		t.Error(err)
	}
}

// A bucket that expires keys by its max age cannot keep a delay: the
// driver says so, and the Client refuses the option.
func TestLockDelayMaxAgeRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := fencenats.Dial(ctx, startNATS(t).URL(), "maxage", fencenats.WithBucketMaxAge(ttl))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.SupportsLockDelay(fence.KindLock) {
		t.Error("SupportsLockDelay on a max-age bucket: true")
	}
	if _, err := fence.New(d).TryAcquire(ctx, "k", fence.WithLockDelay(time.Second)); !errors.Is(err, fence.ErrUnsupported) {
		t.Errorf("WithLockDelay on a max-age bucket: %v; want ErrUnsupported", err)
	}
}
