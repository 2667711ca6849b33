package fencezk_test

import (
	"context"
	"errors"
	"testing"
)

// Waiters counts the contenders queued behind a lock's holder: it grows as
// they queue, shrinks when one gives up, ignores the key's other kinds,
// and is zero once the key is free.
func TestWaiters(t *testing.T) {
	srv := startZooKeeper(t)
	ctx := ctxT(t)
	conn := rawConn(t, srv.Addr())
	d := dial(t, srv.Addr(), sessionTimeout)
	want := func(n int) {
		t.Helper()
		got, err := d.Waiters(ctx, "k")
		if err != nil || got != n {
			t.Fatalf("Waiters = %d, %v; want %d", got, err, n)
		}
	}
	want(0)
	h, err := newFence(t, d).TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	want(0)
	if _, err := newFence(t, d).Semaphore("k", 2).TryAcquire(ctx); err != nil {
		t.Fatal(err)
	}
	waitCtx, giveUp := context.WithCancel(ctx)
	got := make(chan error, 2)
	for _, wctx := range []context.Context{ctx, waitCtx} {
		w := newFence(t, dial(t, srv.Addr(), sessionTimeout))
		go func() {
			_, err := w.Acquire(wctx, "k")
			got <- err
		}()
	}
	waitChildren(t, conn, d, "k", 3)
	want(2)
	giveUp()
	waitChildren(t, conn, d, "k", 2)
	want(1)
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-got; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("waiter: %v", err)
		}
	}
	want(0)
}
