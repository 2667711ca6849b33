package fencepg_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencing/fence"
)

// Grants of one semaphore are serialized by its counter row: callers that
// race on a free semaphore with different limits never get slots with
// both limits at once, and never more than the limit they were granted
// with. Without the counter row's lock (two statements in one implicit
// transaction), each would see the other's slots free and both would be
// granted.
func TestLeaseSemaphoreRacingLimits(t *testing.T) {
	_, pool := server(t)
	ctx := ctxFor(t)
	for round := range 20 {
		key := fmt.Sprintf("race-%d", round)
		var (
			mu      sync.Mutex
			granted = map[int][]*fence.Lease{}
			wg      sync.WaitGroup
			start   = make(chan struct{})
		)
		for i := range 8 {
			c, _ := leaseClient(t, pool, fence.WithTTL(time.Minute))
			limit := 1 + i%2
			wg.Go(func() {
				<-start
				l, err := c.Semaphore(key, limit).TryAcquire(ctx)
				switch {
				case err == nil:
					mu.Lock()
					granted[limit] = append(granted[limit], l)
					mu.Unlock()
				case errors.Is(err, fence.ErrHeld), errors.Is(err, fence.ErrLimitMismatch):
				default:
					t.Errorf("TryAcquire: %v", err)
				}
			})
		}
		close(start)
		wg.Wait()
		if len(granted) != 1 {
			t.Fatalf("round %d: slots granted with limits 1 and 2 at once: %d and %d", round, len(granted[1]), len(granted[2]))
		}
		for limit, ls := range granted {
			if len(ls) > limit {
				t.Errorf("round %d: %d holders of a semaphore with limit %d", round, len(ls), limit)
			}
			for _, l := range ls {
				_ = l.Release(ctx)
			}
		}
	}
}

// An expired slot is taken over with a greater token; the old holder can
// neither renew nor release it.
func TestLeaseSemaphoreExpiredSlot(t *testing.T) {
	_, pool := server(t)
	ctx := ctxFor(t)
	_, d := leaseClient(t, pool)
	req := fence.Request{Key: "s", Owner: "old", TTL: 50 * time.Millisecond, Kind: fence.KindSemaphore, Limit: 1}
	old, err := d.TryAcquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	req.Owner, req.TTL = "new", time.Minute
	var held *fence.HeldError
	if _, err := d.TryAcquire(ctx, req); !errors.As(err, &held) || held.Holder == nil || held.Holder.Owner != "old" || held.Holder.ExpiresIn <= 0 {
		t.Fatalf("full semaphore: %v (holder %+v); want ErrHeld naming the holder whose slot expires first", err, held)
	}
	time.Sleep(100 * time.Millisecond)
	c, err := d.TryAcquire(ctx, req)
	if err != nil {
		t.Fatalf("TryAcquire after the slot expired: %v", err)
	}
	if c.Token() <= old.Token() {
		t.Errorf("token %d after %d", c.Token(), old.Token())
	}
	if err := old.Extend(ctx, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Extend of the expired slot: %v; want ErrNotHeld", err)
	}
	if err := old.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Release of the taken-over slot: %v; want ErrNotHeld", err)
	}
	if err := c.Extend(ctx, time.Minute); err != nil {
		t.Errorf("the new holder's Extend: %v", err)
	}
	if err := c.Release(ctx); err != nil {
		t.Errorf("the new holder's Release: %v", err)
	}
}

// Read and write leases renew over several TTLs; a reader whose backend is
// terminated loses its lease at once and frees the key for a writer with a
// greater token.
func TestSessionRWRenewAndTerminate(t *testing.T) {
	_, pool := server(t)
	ctx := ctxFor(t)
	const ttl = time.Second
	rc := sessionClient(t, openPool(t, pool.Config().ConnString()), fence.WithTTL(ttl))
	r, err := rc.RWMutex("doc").TryAcquireRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * ttl)
	if err := r.Err(); err != nil {
		t.Fatalf("read lease lost over several TTLs: %v", err)
	}
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND mode = 'ShareLock'`); err != nil {
		t.Fatal(err)
	}
	select {
	case <-r.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("read lease still valid after its backend was terminated")
	}
	w, err := sessionClient(t, pool, fence.WithTTL(ttl)).RWMutex("doc").AcquireWrite(ctx, fence.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("writer after the reader's backend ended: %v", err)
	}
	if w.Token() <= r.Token() {
		t.Errorf("writer's token %d not above the reader's %d", w.Token(), r.Token())
	}
	time.Sleep(3 * ttl)
	if err := w.Err(); err != nil {
		t.Fatalf("write lease lost over several TTLs: %v", err)
	}
	if err := w.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
}
