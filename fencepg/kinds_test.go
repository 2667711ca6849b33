package fencepg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencepg"
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

// A slot's release wakes the key's watchers (NOTIFY on the lock table's
// channel, as for locks).
func TestLeaseSemaphoreReleaseNotifies(t *testing.T) {
	_, pool := server(t)
	ctx := ctxFor(t)
	_, d := leaseClient(t, pool)
	c, err := d.TryAcquire(ctx, fence.Request{Key: "s", Owner: "a", TTL: time.Minute, Kind: fence.KindSemaphore, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch, err := d.Watch(wctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no wake-up after a slot's release")
	}
}

// PostgreSQL's lock queue prefers writers: once a writer waits in the
// server, a new reader's try fails and its wait queues behind the writer;
// a cancelled writer leaves the queue at once and lets the reader in.
func TestSessionRWWriterPreference(t *testing.T) {
	_, pool := server(t)
	ctx := ctxFor(t)
	r1, err := sessionClient(t, pool, fence.WithTTL(time.Minute)).RWMutex("doc").TryAcquireRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wd, err := fencepg.NewSessionDriver(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer wd.Close()
	wctx, cancelWriter := context.WithCancel(ctx)
	writerDone := make(chan error, 1)
	go func() {
		_, err := wd.Acquire(wctx, fence.Request{Key: "doc", Owner: "writer", TTL: time.Minute, Kind: fence.KindWrite})
		writerDone <- err
	}()
	waitUngranted(t, ctx, pool, 1)
	reader := sessionClient(t, pool, fence.WithTTL(time.Minute))
	if _, err := reader.RWMutex("doc").TryAcquireRead(ctx); !errors.Is(err, fence.ErrHeld) {
		t.Fatalf("TryAcquireRead while a writer waits: %v; want ErrHeld", err)
	}
	readerDone := make(chan *fence.Lease, 1)
	go func() {
		l, err := reader.RWMutex("doc").AcquireRead(ctx)
		if err != nil {
			t.Errorf("reader behind the writer: %v", err)
		}
		readerDone <- l
	}()
	waitUngranted(t, ctx, pool, 2)
	select {
	case <-readerDone:
		t.Fatal("a reader got in past a waiting writer")
	case <-time.After(300 * time.Millisecond):
	}
	cancelWriter()
	if err := <-writerDone; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled writer: %v", err)
	}
	select {
	case l := <-readerDone:
		if l != nil {
			if l.Token() <= r1.Token() {
				t.Errorf("reader's token %d not above the earlier reader's %d", l.Token(), r1.Token())
			}
			_ = l.Release(ctx)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the cancelled writer still keeps the reader out")
	}
	_ = r1.Release(ctx)
}

// waitUngranted waits until n advisory lock requests wait in the server.
func waitUngranted(t *testing.T, ctx context.Context, pool *pgxpool.Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var waiting int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d advisory lock requests waiting; want %d", waiting, n)
		}
		time.Sleep(10 * time.Millisecond)
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
