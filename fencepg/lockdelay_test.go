package fencepg_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencepg"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// countingLease counts the tries a Client makes through a LeaseStore,
// and is the LeaseStore in every other respect (Watcher, Inspector, ...).
type countingLease struct {
	*fencepg.LeaseStore
	tries atomic.Int64
}

func (c *countingLease) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	c.tries.Add(1)
	return c.LeaseStore.TryAcquire(ctx, req)
}

// A lease-mode lease that expired with a lock-delay keeps its key
// blocked, by the server's clock, against what the conformance check
// does not try: the lost holder's late Extend, Release and Resume, and a
// Break with another token. Inspect, List and the refused try show the lost holder with the
// time until the key is free, and a waiting Client wakes then, by that
// time and not by polling (nothing is notified when a delay ends).
// Keys taken by TryAcquireAll keep the delay too.
func TestLeaseLockDelayLostHolder(t *testing.T) {
	_, pool := server(t)
	ctx := context.Background()
	d, err := fencepg.NewLeaseStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	const ttl, delay = 300 * time.Millisecond, 4 * time.Second

	t0 := time.Now()
	a, err := d.TryAcquire(ctx, fence.Request{Key: "k", Owner: "a", TTL: ttl, LockDelay: delay})
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Now()
	// The key is free between these two times, by the server's clock
	// (on this machine's).
	freeFrom, freeBy := t0.Add(ttl+delay), t1.Add(ttl+delay)
	sets, err := d.TryAcquireAll(ctx, []fence.Request{
		{Key: "m1", Owner: "a1", TTL: ttl, LockDelay: delay},
		{Key: "m2", Owner: "a2", TTL: ttl, LockDelay: delay},
	})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * ttl)

	// left checks that h is a with the time until freeFrom..freeBy left,
	// as measured during [before, now].
	left := func(what string, h *fence.Holder, before time.Time) {
		t.Helper()
		after := time.Now()
		const slack = 5 * time.Millisecond
		switch {
		case h == nil:
			t.Errorf("%s: no holder; want a in its lock-delay", what)
		case h.Owner != "a" || h.Token != a.Token():
			t.Errorf("%s: holder %s (token %d); want a (token %d)", what, h.Owner, h.Token, a.Token())
		case h.ExpiresIn < freeFrom.Sub(after)-slack || h.ExpiresIn > freeBy.Sub(before)+slack:
			t.Errorf("%s: free in %v; want between %v and %v", what, h.ExpiresIn, freeFrom.Sub(after), freeBy.Sub(before))
		}
	}
	blocked := func(when string) {
		t.Helper()
		before := time.Now()
		_, err := d.TryAcquire(ctx, fence.Request{Key: "k", Owner: "b", TTL: time.Minute})
		var held *fence.HeldError
		if !errors.As(err, &held) {
			t.Fatalf("%s: TryAcquire: %v; want held in the lock-delay", when, err)
		}
		left(when, held.Holder, before)
	}
	blocked("in the delay")
	if err := a.Extend(ctx, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("the lost holder's Extend in the delay: %v; want ErrNotHeld", err)
	}
	blocked("after the lost holder's Extend")
	if err := a.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("the lost holder's Release in the delay: %v; want ErrNotHeld", err)
	}
	blocked("after the lost holder's Release")
	if _, err := d.Resume(ctx, fence.Request{Key: "k", Owner: "a", TTL: time.Minute, LockDelay: delay}, a.Token()); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("the lost holder's Resume in the delay: %v; want ErrNotHeld", err)
	}
	blocked("after the lost holder's Resume")
	// A break with another token changes nothing (one with the lost
	// holder's token lifts the delay: fencetest's LockDelay check).
	if _, err := d.Break(ctx, "k", a.Token()+1); !errors.As(err, new(*fence.HeldError)) {
		t.Errorf("Break with another token in the delay: %v; want a *HeldError", err)
	}
	blocked("after a Break with another token")
	before := time.Now()
	h, err := d.Inspect(ctx, "k")
	if err != nil {
		t.Errorf("Inspect in the delay: %v", err)
	}
	left("Inspect", &h, before)
	before = time.Now()
	hs, err := d.List(ctx, "k")
	if err != nil || len(hs) != 1 {
		t.Fatalf("List in the delay: %+v, %v; want k", hs, err)
	}
	left("List", &hs[0], before)
	for i, key := range []string{"m1", "m2"} {
		if _, err := d.TryAcquire(ctx, fence.Request{Key: key, Owner: "b", TTL: time.Minute}); !errors.Is(err, fence.ErrHeld) {
			t.Errorf("%s, taken by TryAcquireAll with a delay, after its lease expired: %v; want held", key, err)
		}
		if err := sets[i].Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
			t.Errorf("%s: the lost holder's Release: %v; want ErrNotHeld", key, err)
		}
	}

	// A waiter wakes when the delay ends: by the holder's reported time,
	// since no NOTIFY comes, and without trying in a loop meanwhile.
	cd := &countingLease{LeaseStore: d}
	l, err := fence.New(cd).Acquire(ctx, "k", fence.WithWait(delay+10*time.Second))
	if err != nil {
		t.Fatalf("waiting for the end of the delay: %v", err)
	}
	defer l.Release(ctx)
	got := time.Now()
	if got.Before(freeFrom.Add(-5 * time.Millisecond)) {
		t.Errorf("the waiter got the key %v before the delay ended", freeFrom.Sub(got))
	}
	if late := got.Sub(freeBy); late > 500*time.Millisecond {
		t.Errorf("the waiter got the key %v after the delay ended; want it woken then", late)
	}
	// About one try per second of the wait (the Client's slowest poll
	// behind a watch), plus the first ones and the one at the end.
	if n := cd.tries.Load(); n > int64(delay/(500*time.Millisecond))+4 {
		t.Errorf("%d tries while waiting %v for the delay to end; want a few, not a busy loop", n, delay)
	}
	if l.Token() <= a.Token() {
		t.Errorf("token %d after the delay, not greater than the lost holder's %d", l.Token(), a.Token())
	}
}

// Setup adds lock_delay to a lock table made by a version without
// lock-delays: the table's rows keep their leases and tokens, and new
// leases keep their delays. On a table that has the column, Setup only
// reads the catalog: it does not wait for a transaction that reads the
// table (ALTER TABLE would, for its ACCESS EXCLUSIVE lock).
func TestLeaseLockDelaySetupMigrates(t *testing.T) {
	srv := testserver.Postgres(t)
	pool := openPool(t, srv.DSN())
	ctx := context.Background()
	exec(t, pool, `CREATE TABLE fence_locks (
		key        text PRIMARY KEY,
		token      bigint NOT NULL CHECK (token > 0),
		owner      text,
		expires_at timestamptz,
		meta       jsonb,
		acquired_at timestamptz
	)`)
	exec(t, pool, `INSERT INTO fence_locks VALUES ('held', 7, 'old', now() + interval '1 hour', NULL, now()),
		('free', 9, NULL, now(), NULL, now())`)
	d, err := fencepg.NewLeaseStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if _, err := d.TryAcquire(ctx, fence.Request{Key: "free", Owner: "a", TTL: time.Minute}); err == nil {
		t.Fatal("acquire on the old table before Setup succeeded; want an error (no lock_delay column)")
	}
	if err := fencepg.Setup(ctx, pool); err != nil {
		t.Fatalf("Setup on the old table: %v", err)
	}
	if h, err := d.Inspect(ctx, "held"); err != nil || h.Owner != "old" || h.Token != 7 {
		t.Errorf("the old row's lease after Setup: %+v, %v", h, err)
	}
	a, err := d.TryAcquire(ctx, fence.Request{Key: "free", Owner: "a", TTL: 100 * time.Millisecond, LockDelay: time.Hour})
	if err != nil {
		t.Fatalf("acquire with a delay on the migrated table: %v", err)
	}
	if a.Token() <= 9 {
		t.Errorf("token %d after the old row's 9", a.Token())
	}
	time.Sleep(200 * time.Millisecond)
	if _, err := d.TryAcquire(ctx, fence.Request{Key: "free", Owner: "b", TTL: time.Minute}); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("after the lease expired on the migrated table: %v; want held (its delay runs)", err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM fence_locks`); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := fencepg.Setup(sctx, pool); err != nil {
		t.Errorf("Setup on a migrated table while a transaction reads it: %v; want done without waiting", err)
	}
}
