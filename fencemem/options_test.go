package fencemem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

// WithClock: the Store judges expiry by the clock it is given. A lease
// whose TTL has run out on that clock (not on the wall clock, which moves
// by milliseconds here) is free for the next holder, and Inspect reports
// the time left on it.
func TestWithClock(t *testing.T) {
	ctx := context.Background()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var elapsed atomic.Int64 // nanoseconds past start
	now := func() time.Time { return start.Add(time.Duration(elapsed.Load())) }
	store := fencemem.New(fencemem.WithClock(now))
	a := fence.New(store, fence.WithTTL(time.Minute))
	defer a.Close(ctx)
	b := fence.New(store, fence.WithTTL(time.Minute))
	defer b.Close(ctx)

	l, err := a.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	h, err := store.Inspect(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if h.ExpiresIn != time.Minute {
		t.Errorf("Inspect: expires in %v; want 1m, the given clock not having moved", h.ExpiresIn)
	}
	elapsed.Store(int64(59 * time.Second))
	if h, err := store.Inspect(ctx, "k"); err != nil || h.ExpiresIn != time.Second {
		t.Errorf("Inspect 59s later on the given clock: expires in %v (%v); want 1s", h.ExpiresIn, err)
	}
	if _, err := b.TryAcquire(ctx, "k"); !errors.Is(err, fence.ErrHeld) {
		t.Fatalf("59s into a 1m lease on the given clock: %v; want ErrHeld", err)
	}
	elapsed.Store(int64(61 * time.Second))
	l2, err := b.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("61s into a 1m lease on the given clock: %v; want the key free", err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after %d", l2.Token(), l.Token())
	}
	_ = l2.Release(ctx)
	_ = l.Release(ctx)
}
