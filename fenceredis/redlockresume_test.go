package fenceredis

import (
	"errors"
	"testing"
	"time"

	"github.com/fencing/fence"
)

// Resume on Redlock needs a quorum: with the lease on one server of
// three it is refused, ErrNotHeld if the others are free, a *HeldError
// if another owner holds them, and what it extended on that one server
// is given back rather than left extended.
func TestRedlockResumeNeedsQuorum(t *testing.T) {
	ctx := testCtx(t)
	_, connect, raw := redlockSetup(t, 3)
	r := mustOpen(t, connect).(*Redlock)
	n := lockNames(DefaultPrefix, "k")
	for _, other := range []string{"", "someone-else"} {
		req := fence.Request{Key: "k", Owner: "o", TTL: 5 * time.Second}
		cl, err := r.TryAcquire(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		r.running.Wait()
		// A server whose grant came after the quorum keeps the lock
		// without its counter raised to the token, and refuses a
		// resume; here every server had it raised.
		for _, c := range raw.cs {
			if err := c.Set(ctx, n.counter, cl.Token(), 0).Err(); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Second) // so that an extension shows in the PTTL
		for _, c := range raw.cs[1:] {
			if other == "" {
				err = c.Del(ctx, n.lock).Err()
			} else {
				err = c.Set(ctx, n.lock, other, 5*time.Second).Err()
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		_, err = r.Resume(ctx, req, cl.Token())
		var held *fence.HeldError
		switch {
		case other == "" && !errors.Is(err, fence.ErrNotHeld):
			t.Errorf("resume with the lease on one server of three, the others free: %v; want ErrNotHeld", err)
		case other != "" && !errors.As(err, &held):
			t.Errorf("resume with the lease on one server of three, the others held: %v; want a *HeldError", err)
		case other != "" && held.Holder.Owner != other:
			t.Errorf("resume refused, holder %+v; want %q", held.Holder, other)
		}
		// The server that still held the lease extended it: it must
		// have been given back.
		r.running.Wait()
		if pttl := raw.cs[0].PTTL(ctx, n.lock).Val(); pttl > req.TTL-time.Second/2 {
			t.Errorf("other %q: after a refused resume, the one server that held the lease keeps it extended (PTTL %v)", other, pttl)
		}
		raw.cs[0].Del(ctx, n.lock)
		for _, c := range raw.cs[1:] {
			c.Del(ctx, n.lock)
		}
	}
}

// A Redlock lease in its lock-delay is not resumed, and the refused
// resume leaves the key blocked.
func TestRedlockResumeInLockDelay(t *testing.T) {
	ctx := testCtx(t)
	_, connect, _ := redlockSetup(t, 3)
	r := mustOpen(t, connect).(*Redlock)
	req := fence.Request{Key: "k", Owner: "o", TTL: time.Second, LockDelay: 3 * time.Second}
	start := time.Now()
	cl, err := r.TryAcquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(start.Add(1500 * time.Millisecond)))
	if _, err := r.Resume(ctx, req, cl.Token()); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("resume in the lock-delay: %v; want ErrNotHeld", err)
	}
	req.LockDelay = 0
	if _, err := r.Resume(ctx, req, cl.Token()); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("resume without a delay, in the lock-delay: %v; want ErrNotHeld", err)
	}
	_, err = r.TryAcquire(ctx, fence.Request{Key: "k", Owner: "next", TTL: time.Second})
	var held *fence.HeldError
	if !errors.As(err, &held) && time.Since(start) < 3900*time.Millisecond {
		t.Errorf("TryAcquire in the lock-delay after refused resumes: %v; want a *HeldError", err)
	}
}
