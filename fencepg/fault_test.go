package fencepg_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencepg"
)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func sessionClient(t *testing.T, pool *pgxpool.Pool, opts ...fence.ClientOption) *fence.Client {
	t.Helper()
	d, err := fencepg.NewSessionStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	c := fence.New(d, opts...)
	t.Cleanup(func() {
		_ = c.Close(context.Background())
		_ = d.Close()
	})
	return c
}

func leaseClient(t *testing.T, pool *pgxpool.Pool, opts ...fence.ClientOption) (*fence.Client, *fencepg.LeaseStore) {
	t.Helper()
	d, err := fencepg.NewLeaseStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	c := fence.New(d, opts...)
	t.Cleanup(func() {
		_ = c.Close(context.Background())
		_ = d.Close()
	})
	return c, d
}

// A session-mode wait cancelled by its context leaves no lock request
// queued in the server, and the connection it used is not reused.
func TestSessionCancelledWaitLeavesNoRequest(t *testing.T) {
	_, pool := server(t)
	ctx := ctxFor(t)
	a := sessionClient(t, pool, fence.WithTTL(time.Minute))
	b := sessionClient(t, pool, fence.WithTTL(time.Minute))
	l, err := a.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := b.Acquire(wctx, "job"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("cancelled wait: %v; want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("the cancelled wait took %v to end", d)
	}
	var waiting int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted`).Scan(&waiting); err != nil {
		t.Fatal(err)
	}
	if waiting != 0 {
		t.Errorf("%d advisory lock requests still waiting after the wait was cancelled", waiting)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := b.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatalf("TryAcquire after release: %v", err)
	}
	_ = l2.Release(ctx)
}

// Lease-mode rows are ordinary data: a PostgreSQL restart keeps the lease
// and the token counter, so tokens keep increasing.
func TestLeaseTokensIncreaseAcrossRestart(t *testing.T) {
	srv, pool := server(t)
	ctx := ctxFor(t)
	a, _ := leaseClient(t, pool, fence.WithTTL(time.Minute))
	var last int64
	for range 3 {
		l, err := a.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	held, err := a.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if held.Token() <= last {
		t.Fatalf("token %d after %d", held.Token(), last)
	}

	srv.Kill()
	srv.Restart()

	b, _ := leaseClient(t, pool, fence.WithTTL(time.Minute))
	var h *fence.HeldError
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err = b.TryAcquire(ctx, "job")
		if errors.As(err, &h) || err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond) // the pool reconnects
	}
	if h == nil || h.Holder == nil || h.Holder.Token != held.Token() {
		t.Fatalf("after a restart, TryAcquire of the held key: %v; want held by token %d", err, held.Token())
	}
	if err := held.Renew(ctx); err != nil {
		t.Errorf("Renew after the restart: %v", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("Release after the restart: %v", err)
	}
	l, err := b.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() <= held.Token() {
		t.Errorf("token after the restart %d is not above %d", l.Token(), held.Token())
	}
	_ = l.Release(ctx)
}

// The lease-mode Watcher wakes a waiter on release, through one LISTEN
// connection, also for keys too long for a NOTIFY payload.
func TestLeaseWatchWakesOnRelease(t *testing.T) {
	_, pool := server(t)
	ctx := ctxFor(t)
	a, d := leaseClient(t, pool, fence.WithTTL(time.Minute))
	for _, key := range []string{"job", strings.Repeat("k", fence.MaxKeyLen)} {
		l, err := a.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		wctx, stop := context.WithCancel(ctx)
		ch, err := d.Watch(wctx, key)
		if err != nil {
			t.Fatal(err)
		}
		other, err := d.Watch(wctx, key+"-other")
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
			t.Fatalf("%.20q: woken while held", key)
		case <-time.After(200 * time.Millisecond):
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%.20q: waiter not woken by the release", key)
		}
		select {
		case <-other:
			t.Errorf("%.20q: a waiter on another key was woken", key)
		default:
		}
		stop()
	}
}

// A key whose advisory id another key already uses is refused with
// ErrKeyCollision rather than silently sharing a lock. A real SHA-256
// collision cannot be produced, so the test plants a row as if one had
// happened.
func TestKeyCollisionDetected(t *testing.T) {
	_, pool := server(t)
	ctx := ctxFor(t)
	exec(t, pool, `INSERT INTO fence_tokens (key, lock_id, token) VALUES ('impostor', $1, 7)`, fencepg.AdvisoryID("job"))
	c := sessionClient(t, pool)
	if _, err := c.TryAcquire(ctx, "job"); !errors.Is(err, fencepg.ErrKeyCollision) {
		t.Errorf("session TryAcquire of a colliding key: %v; want ErrKeyCollision", err)
	}
	if _, err := c.Acquire(ctx, "job"); !errors.Is(err, fencepg.ErrKeyCollision) {
		t.Errorf("session Acquire of a colliding key: %v; want ErrKeyCollision", err)
	}
	locker, _ := fencepg.NewTxLocker()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := locker.TryLock(ctx, tx, "job")
		return err
	})
	if !errors.Is(err, fencepg.ErrKeyCollision) {
		t.Errorf("TxLocker.TryLock of a colliding key: %v; want ErrKeyCollision", err)
	}
	// Nothing stays locked.
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("advisory locks left after refused collisions: %d (%v)", n, err)
	}
}

// A session-mode Acquire waiting in the server goes on waiting, on a new
// connection, when its connection ends: the waiting backend terminated
// (57P01), then the server killed and restarted, which frees the
// holder's lock.
func TestSessionWaitSurvivesLostConnection(t *testing.T) {
	srv, pool := server(t)
	ctx := ctxFor(t)
	a := sessionClient(t, pool, fence.WithTTL(time.Minute))
	b := sessionClient(t, pool, fence.WithTTL(time.Minute))
	held, err := a.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release(ctx)
	got := make(chan error, 1)
	go func() {
		l, err := b.Acquire(ctx, "job", fence.WithWait(time.Minute))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	// waiter returns the pid of the backend waiting for the lock, once
	// there is one other than gone.
	waiter := func(gone int32) int32 {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			var pid int32
			err := pool.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid <> $1`, gone).Scan(&pid)
			if err == nil {
				return pid
			}
			select {
			case err := <-got:
				t.Fatalf("Acquire returned while waiting, its connection ended: %v; want it to wait on", err)
			case <-time.After(10 * time.Millisecond):
			}
		}
		t.Fatal("no backend waits for the lock")
		return 0
	}
	first := waiter(0)
	exec(t, pool, `SELECT pg_terminate_backend($1)`, first)
	waiter(first)

	srv.Kill()
	time.Sleep(time.Second)
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Acquire, waiting through the restart: %v; want the key, which the restart freed", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting Acquire did not get the key after the restart")
	}
}
