package fencesqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencesqlite"
)

// A lease that expired with a lock-delay keeps its key blocked, by the
// Store's clock, until the delay after its expiry, against everything
// the conformance check does not try: the lost holder's late Extend,
// Release and Resume, a Break with another token, and a contender that asks for no delay.
// Inspect, List and the refused try show the lost holder with the time
// until the key is free. The contender's own lease, taken without a
// delay, is free at its expiry: a row's delay is its lease's, not
// inherited. The clock is stepped, so the test does not depend on the
// machine's load.
func TestLockDelayLostHolderCannotFreeKey(t *testing.T) {
	ctx := context.Background()
	var clk clock
	s := open(t, filepath.Join(t.TempDir(), "fence.db"), fencesqlite.WithClock(clk.now))
	const ttl, delay = time.Minute, 10 * time.Minute
	withDelay := func(key, owner string) fence.Request {
		r := req(key, owner, ttl)
		r.LockDelay = delay
		return r
	}

	// Released while live: free at once.
	c, err := s.TryAcquire(ctx, withDelay("k", "a0"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatalf("Release of a live lease with a delay: %v", err)
	}

	a, err := s.TryAcquire(ctx, withDelay("k", "a"))
	if err != nil {
		t.Fatalf("after a release under a delay: %v; want the key free", err)
	}
	// until is no earlier than the key is free, on the real clock, while
	// clk is not stepped again.
	until := time.Now().Add(ttl + delay)
	clk.step(ttl + time.Minute) // expired a minute ago; nine minutes of delay left
	const left = delay - time.Minute
	until = until.Add(-(ttl + time.Minute))

	blocked := func(when string) {
		t.Helper()
		before := time.Now()
		_, err := s.TryAcquire(ctx, req("k", "b", ttl))
		var held *fence.HeldError
		if !errors.As(err, &held) || held.Holder == nil || held.Holder.Owner != "a" || held.Holder.Token != a.Token() {
			t.Fatalf("%s: TryAcquire: %v; want held by a (token %d) in its lock-delay", when, err, a.Token())
		}
		if d, want := held.Holder.ExpiresIn, until.Sub(before); d > want+time.Millisecond || d < want-time.Second {
			t.Errorf("%s: held, free in %v; want the delay left, %v", when, d, want)
		}
	}
	blocked("in the delay")
	if err := a.Extend(ctx, ttl); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("the lost holder's Extend in the delay: %v; want ErrNotHeld", err)
	}
	blocked("after the lost holder's Extend")
	if err := a.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("the lost holder's Release in the delay: %v; want ErrNotHeld", err)
	}
	blocked("after the lost holder's Release")
	if _, err := s.Resume(ctx, withDelay("k", "a"), a.Token()); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("the lost holder's Resume in the delay: %v; want ErrNotHeld", err)
	}
	blocked("after the lost holder's Resume")
	// A break with another token changes nothing (one with the lost
	// holder's token lifts the delay: fencetest's LockDelay check).
	if _, err := s.Break(ctx, "k", a.Token()+1); !errors.As(err, new(*fence.HeldError)) {
		t.Errorf("Break with another token in the delay: %v; want a *HeldError", err)
	}
	blocked("after a Break with another token")

	h, err := s.Inspect(ctx, "k")
	if err != nil || h.Owner != "a" || h.Token != a.Token() || h.ExpiresIn > left || h.ExpiresIn < left-time.Second {
		t.Errorf("Inspect in the delay: %+v, %v; want a, free in %v", h, err, left)
	}
	hs, err := s.List(ctx, "")
	if err != nil || len(hs) != 1 || hs[0].Key != "k" || hs[0].Owner != "a" || hs[0].ExpiresIn > left {
		t.Errorf("List in the delay: %+v, %v; want k held by a", hs, err)
	}

	// The clock also runs: step to a second before the end, then past it.
	clk.step(left - time.Second)
	until = until.Add(-(left - time.Second))
	blocked("a second before the delay ends")
	clk.step(time.Second)
	b, err := s.TryAcquire(ctx, req("k", "b", ttl))
	if err != nil {
		t.Fatalf("once the delay is over: %v; want the key free", err)
	}
	if b.Token() <= a.Token() {
		t.Errorf("token %d after the delay, not greater than the lost holder's %d", b.Token(), a.Token())
	}
	if _, err := s.Inspect(ctx, "k"); err != nil {
		t.Errorf("Inspect of b's lease: %v", err)
	}

	// b asked for no delay: its lease ends at its expiry.
	clk.step(ttl)
	if _, err := s.Inspect(ctx, "k"); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Inspect after b's lease (no delay) expired: %v; want ErrNotHeld", err)
	}
	c, err = s.TryAcquire(ctx, req("k", "c", ttl))
	if err != nil {
		t.Fatalf("after a lease without a delay expired: %v; want the key free", err)
	}
	_ = c.Release(ctx)
}

// A live lease with a delay can be broken and resumed as any other: a
// Break frees the key at once, and a Resume keeps the lease's delay.
func TestLockDelayBreakAndResumeLive(t *testing.T) {
	ctx := context.Background()
	var clk clock
	s := open(t, filepath.Join(t.TempDir(), "fence.db"), fencesqlite.WithClock(clk.now))
	r := req("k", "a", time.Minute)
	r.LockDelay = time.Hour
	a, err := s.TryAcquire(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Resume(ctx, r, a.Token()); err != nil {
		t.Fatalf("Resume of the live lease: %v", err)
	}
	clk.step(2 * time.Minute)
	if _, err := s.TryAcquire(ctx, req("k", "b", time.Minute)); !errors.Is(err, fence.ErrHeld) {
		t.Fatalf("after the resumed lease expired: %v; want held (its delay runs)", err)
	}
	clk.step(time.Hour)
	a, err = s.TryAcquire(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Break(ctx, "k", a.Token()); err != nil {
		t.Fatalf("Break of a live lease with a delay: %v", err)
	}
	b, err := s.TryAcquire(ctx, req("k", "b", time.Minute))
	if err != nil {
		t.Fatalf("after a Break of a live lease: %v; want the key free at once", err)
	}
	_ = b.Release(ctx)
}

// A database file made by a version without lock-delays (its table has
// no delay_us) is migrated by Open: its rows keep their leases, and new
// leases keep their delays.
func TestLockDelayOldSchema(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fence.db")
	old := open(t, path)
	db := old.DB()
	for _, q := range []string{
		`DROP TABLE fence_locks`,
		`CREATE TABLE fence_locks (
			key         TEXT PRIMARY KEY,
			token       INTEGER NOT NULL,
			owner       TEXT,
			expires_us  INTEGER,
			meta        TEXT,
			acquired_us INTEGER
		)`,
	} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	now := time.Now().UnixMicro()
	if _, err := db.ExecContext(ctx, `INSERT INTO fence_locks VALUES ('held', 7, 'old', ?1, NULL, ?2), ('free', 9, NULL, ?2, NULL, ?2)`,
		now+int64(time.Hour/time.Microsecond), now); err != nil {
		t.Fatal(err)
	}
	old.Close()

	s := open(t, path)
	if h, err := s.Inspect(ctx, "held"); err != nil || h.Owner != "old" || h.Token != 7 {
		t.Errorf("the old row's lease after the migration: %+v, %v", h, err)
	}
	r := req("free", "a", 100*time.Millisecond)
	r.LockDelay = time.Hour
	a, err := s.TryAcquire(ctx, r)
	if err != nil {
		t.Fatalf("acquire with a delay on the migrated table: %v", err)
	}
	if a.Token() <= 9 {
		t.Errorf("token %d after the old row's 9", a.Token())
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := s.TryAcquire(ctx, req("free", "b", time.Minute)); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("after the lease expired on the migrated table: %v; want held (its delay runs)", err)
	}
	// Opening again finds the column and changes nothing.
	again := open(t, path)
	if _, err := again.TryAcquire(ctx, req("free", "b", time.Minute)); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("through a second Store: %v; want held", err)
	}
}

// The Client's AcquireAll takes the keys one by one here (the Store has
// no TryAcquireAll): each key keeps the set's lock-delay.
func TestLockDelayAcquireAll(t *testing.T) {
	ctx := context.Background()
	var clk clock
	s := open(t, filepath.Join(t.TempDir(), "fence.db"), fencesqlite.WithClock(clk.now))
	set, err := fence.New(s).AcquireAll(ctx, []string{"x", "y"}, fence.WithTTL(time.Minute), fence.WithLockDelay(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	clk.step(2 * time.Minute) // expired in the store; the Client's validity runs on its own clock
	for _, key := range []string{"x", "y"} {
		if _, err := s.TryAcquire(ctx, req(key, "b", time.Minute)); !errors.Is(err, fence.ErrHeld) {
			t.Errorf("%s after the set's leases expired: %v; want held (the delay runs)", key, err)
		}
	}
	if err := set.Release(ctx); err == nil {
		t.Error("the set's Release after its leases expired in the store: nil; want an error")
	}
	for _, key := range []string{"x", "y"} {
		if _, err := s.TryAcquire(ctx, req(key, "b", time.Minute)); !errors.Is(err, fence.ErrHeld) {
			t.Errorf("%s after the lost set's Release: %v; want held (the delay runs)", key, err)
		}
	}
}
