package fenceredis

import (
	"errors"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// A retried TryAcquireAll (go-redis resends a script whose reply was
// lost) gets the tokens of the first run, and changes nothing.
func TestAcquireAllRetryKeepsTokens(t *testing.T) {
	ctx := testCtx(t)
	connect := connectSingle(testserver.Redis(t))
	s := mustOpen(t, connect).(*Store)
	reqs := []fence.Request{
		{Key: "a", Owner: "o-a", TTL: time.Minute, LockDelay: time.Second},
		{Key: "b", Owner: "o-b", TTL: time.Minute, LockDelay: time.Second},
	}
	first, err := s.TryAcquireAll(ctx, reqs)
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.TryAcquireAll(ctx, reqs)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	for i := range first {
		if first[i].Token() != again[i].Token() {
			t.Errorf("%q: retry got token %d, first %d", reqs[i].Key, again[i].Token(), first[i].Token())
		}
	}
	other := []fence.Request{{Key: "0", Owner: "x", TTL: time.Minute}, {Key: "b", Owner: "x", TTL: time.Minute}}
	var held *fence.HeldError
	if _, err := s.TryAcquireAll(ctx, other); !errors.As(err, &held) || held.Key != "b" || held.Holder.Owner != "o-b" || held.Holder.Token != first[1].Token() {
		t.Fatalf("b held: %v (%+v); want its *HeldError naming o-b", err, held)
	}
	if _, err := s.Inspect(ctx, "0"); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("a refused TryAcquireAll took key 0: %v", err)
	}
	for i, c := range first {
		if err := c.Release(ctx); err != nil {
			t.Errorf("release %q: %v", reqs[i].Key, err)
		}
	}
	if left, err := newRaw(t, connect).leftovers(ctx, ""); err != nil || len(left) != 0 {
		t.Errorf("left after release: %q, %v", left, err)
	}
}

// A lease with a lock-delay that ran out can be neither renewed nor
// released (the release would lift the delay), and holds the key, for
// anyone, until the delay is over.
func TestLockDelayOutlivesTheLease(t *testing.T) {
	ctx := testCtx(t)
	s := mustOpen(t, connectSingle(testserver.Redis(t))).(*Store)
	c, err := s.TryAcquire(ctx, fence.Request{Key: "k", Owner: "o", TTL: 100 * time.Millisecond, LockDelay: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Extend(ctx, 100*time.Millisecond); err != nil {
		t.Fatalf("extend of a live lease: %v", err)
	}
	time.Sleep(150 * time.Millisecond)
	if err := c.Extend(ctx, time.Second); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("extend after the lease's end: %v; want ErrNotHeld", err)
	}
	if err := c.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("release after the lease's end: %v; want ErrNotHeld", err)
	}
	_, err = s.TryAcquire(ctx, fence.Request{Key: "k", Owner: "p", TTL: time.Second})
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder.Owner != "o" || held.Holder.ExpiresIn < 50*time.Second {
		t.Fatalf("TryAcquire in the delay: %v (%+v); want held by o for about a minute", err, held)
	}
}

// A resumed lease keeps the lock-delay it has in the store: once it runs
// out, the key stays blocked for the delay, and is not resumed; a break
// lifts the delay, leaving nothing but the counter.
func TestResumeKeepsTheLockDelay(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	s := mustOpen(t, connectSingle(srv)).(*Store)
	req := fence.Request{Key: "k", Owner: "o", TTL: time.Minute, LockDelay: time.Minute}
	c, err := s.TryAcquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	resumed := fence.Request{Key: "k", Owner: "o", TTL: 200 * time.Millisecond}
	r, err := s.Resume(ctx, resumed, c.Token())
	if err != nil {
		t.Fatalf("resume of a live lease with a lock-delay: %v", err)
	}
	if err := r.Extend(ctx, 200*time.Millisecond); err != nil {
		t.Fatalf("extend of the resumed lease: %v", err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := r.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("release of the resumed lease after its end: %v; want ErrNotHeld", err)
	}
	_, err = s.TryAcquire(ctx, fence.Request{Key: "k", Owner: "p", TTL: time.Second})
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder.Owner != "o" || held.Holder.ExpiresIn < 50*time.Second {
		t.Fatalf("TryAcquire after the resumed lease ran out: %v (%+v); want held by o for about its minute of delay", err, held)
	}
	if _, err := s.Resume(ctx, resumed, c.Token()); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("resume within the delay: %v; want ErrNotHeld", err)
	}
	if _, err := s.Break(ctx, "k", c.Token()+1); !errors.As(err, &held) {
		t.Errorf("break with another token within the delay: %v; want a *HeldError", err)
	}
	// Breaking the lease in its delay lifts the delay, :until and all.
	if h, err := s.Break(ctx, "k", 0); err != nil || h.Token != c.Token() {
		t.Fatalf("break of any holder within the delay: %+v, %v; want o's lease broken", h, err)
	}
	if left, err := newRaw(t, connectSingle(srv)).leftovers(ctx, ""); err != nil || len(left) != 0 {
		t.Errorf("left after the break: %q, %v; want nothing (but the counter, which is not a leftover)", left, err)
	}
	next, err := s.TryAcquire(ctx, fence.Request{Key: "k", Owner: "p", TTL: time.Second})
	if err != nil || next.Token() <= c.Token() {
		t.Fatalf("after the break: %v; want the key free, with a greater token", err)
	}
	next.Release(ctx)
}
