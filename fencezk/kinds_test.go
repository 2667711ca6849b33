package fencezk_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencezk"
)

// kindChildren returns the queue of key's kind ("sem" or "rw"), lowest
// sequence first.
func kindChildren(t *testing.T, conn *zk.Conn, d *fencezk.Driver, key, kind string) []string {
	t.Helper()
	kids, _, err := conn.Children(d.KeyPath(key) + "%" + kind)
	if err == zk.ErrNoNode {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(kids, func(a, b string) int { return strings.Compare(a[len(a)-10:], b[len(b)-10:]) })
	return kids
}

func waitKindChildren(t *testing.T, conn *zk.Conn, d *fencezk.Driver, key, kind string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(kindChildren(t, conn, d, key, kind)) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%s queue of %q: %q; want %d entries", kind, key, kindChildren(t, conn, d, key, kind), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A lock, a semaphore and a reader-writer lock on one key are separate
// queues; List sees the lock only; refused TryAcquires leave nothing.
func TestKindsAreSeparate(t *testing.T) {
	srv := startZooKeeper(t)
	ctx := ctxT(t)
	conn := rawConn(t, srv.Addr())
	d := dial(t, srv.Addr(), sessionTimeout)
	c := newFence(t, d)
	l, err := c.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.Semaphore("k", 1).TryAcquire(ctx)
	if err != nil {
		t.Fatalf("semaphore beside a lock: %v", err)
	}
	w, err := c.RWMutex("k").TryAcquireWrite(ctx)
	if err != nil {
		t.Fatalf("writer beside a lock and a semaphore: %v", err)
	}
	other := newFence(t, dial(t, srv.Addr(), sessionTimeout))
	if _, err := other.Semaphore("k", 1).TryAcquire(ctx); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("full semaphore: %v; want ErrHeld", err)
	}
	var held *fence.HeldError
	if _, err := other.RWMutex("k").TryAcquireRead(ctx); !errors.As(err, &held) {
		t.Errorf("reader beside a writer: %v; want ErrHeld", err)
	} else if held.Holder == nil || held.Holder.Token != w.Token() {
		t.Errorf("reader refused with holder %+v; want the writer, token %d", held.Holder, w.Token())
	}
	if e := kindChildren(t, conn, d, "k", "sem"); len(e) != 1 {
		t.Errorf("semaphore queue after a refused TryAcquire: %q", e)
	}
	if e := kindChildren(t, conn, d, "k", "rw"); len(e) != 1 {
		t.Errorf("rw queue after a refused TryAcquire: %q", e)
	}
	hs, err := c.List(ctx, "")
	if err != nil || len(hs) != 1 || hs[0].Key != "k" || hs[0].Token != l.Token() {
		t.Errorf("List = %+v, %v; want the lock only", hs, err)
	}
	for _, x := range []*fence.Lease{l, s, w} {
		if err := x.Release(ctx); err != nil {
			t.Error(err)
		}
	}
}

// Waiters for a semaphore get slots in queue order, one per release, with
// tokens above every earlier grant's although their znodes were created
// before some of those grants. (The waiters call the driver's Acquire: the
// Client's first TryAcquire would queue and delete a znode of its own
// first, which would make the queue order the test waits for ambiguous.)
func TestSemaphoreFIFOTokens(t *testing.T) {
	srv := startZooKeeper(t)
	ctx := ctxT(t)
	conn := rawConn(t, srv.Addr())
	d0 := dial(t, srv.Addr(), sessionTimeout)
	c := newFence(t, d0)
	const limit = 2
	h1, err := c.Semaphore("s", limit).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := c.Semaphore("s", limit).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Semaphore("s", limit+1).TryAcquire(ctx); !errors.Is(err, fence.ErrLimitMismatch) {
		t.Errorf("limit %d while held with %d: %v; want ErrLimitMismatch", limit+1, limit, err)
	}
	if _, err := c.Semaphore("s", limit+1).Acquire(ctx, fence.WithWait(time.Second)); !errors.Is(err, fence.ErrLimitMismatch) {
		t.Errorf("waiting with limit %d while held with %d: %v; want ErrLimitMismatch", limit+1, limit, err)
	}
	const waiters = 3
	var (
		mu     sync.Mutex
		order  []int
		leases = make([]fence.Claim, waiters)
		wg     sync.WaitGroup
	)
	for i := range waiters {
		w := dial(t, srv.Addr(), sessionTimeout)
		wg.Go(func() {
			l, err := w.Acquire(ctx, fence.Request{Key: "s", Owner: fmt.Sprint("w", i), TTL: ttl, Kind: fence.KindSemaphore, Limit: limit})
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			leases[i] = l
			mu.Unlock()
		})
		waitKindChildren(t, conn, d0, "s", "sem", limit+i+1)
	}
	// Free one slot at a time: two slots freed at once would admit two
	// waiters together, and the order they report in would be a race.
	granted := func(want int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			mu.Lock()
			n := len(order)
			mu.Unlock()
			if n == want {
				break
			}
			if n > want || time.Now().After(deadline) {
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("after %d releases, waiters %v got slots; want the first %d", want, order, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
		// Long enough for a wrongly admitted waiter to show up.
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
		n := len(order)
		mu.Unlock()
		if n != want {
			t.Fatalf("after %d releases, %d waiters got slots", want, n)
		}
	}
	if err := h2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	granted(1)
	if err := h1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	granted(2)
	mu.Lock()
	first := leases[order[0]]
	mu.Unlock()
	if err := first.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if fmt.Sprint(order) != "[0 1 2]" {
		t.Errorf("waiters got slots in order %v; want [0 1 2] (FIFO)", order)
	}
	last := h2.Token()
	for _, i := range order {
		if leases[i].Token() <= last {
			t.Errorf("waiter %d's token %d not above the earlier grant's %d", i, leases[i].Token(), last)
		}
		last = leases[i].Token()
	}
	for _, l := range leases[1:] {
		_ = l.Release(ctx)
	}
	if e := kindChildren(t, conn, d0, "s", "sem"); len(e) != 0 {
		t.Errorf("semaphore queue after everyone left: %q", e)
	}
}

// A semaphore slot whose holder's znode is deleted (as its session's
// expiry would) goes to the next waiter, and the holder's lease is lost.
func TestSemaphoreHolderZnodeDeleted(t *testing.T) {
	srv := startZooKeeper(t)
	ctx := ctxT(t)
	conn := rawConn(t, srv.Addr())
	d0 := dial(t, srv.Addr(), sessionTimeout)
	h, err := newFence(t, d0).Semaphore("s", 1).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *fence.Lease, 1)
	go func() {
		l, err := newFence(t, dial(t, srv.Addr(), sessionTimeout)).Semaphore("s", 1).Acquire(ctx)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}()
	waitKindChildren(t, conn, d0, "s", "sem", 2)
	if err := conn.Delete(d0.KeyPath("s")+"%sem/"+kindChildren(t, conn, d0, "s", "sem")[0], -1); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l != nil {
			if l.Token() <= h.Token() {
				t.Errorf("token %d after %d", l.Token(), h.Token())
			}
			_ = l.Release(ctx)
		}
	case <-time.After(3 * ttl):
		t.Fatal("waiter not granted the slot of a deleted holder")
	}
	select {
	case <-h.Done():
	case <-time.After(3 * ttl):
		t.Error("deleted holder's lease still valid")
	}
}

// A waiting writer keeps readers that come after it out (FIFO), and a
// writer that gives up lets them in at once: its znode is gone.
func TestRWWriterPreference(t *testing.T) {
	srv := startZooKeeper(t)
	ctx := ctxT(t)
	conn := rawConn(t, srv.Addr())
	d0 := dial(t, srv.Addr(), sessionTimeout)
	r1, err := newFence(t, d0).RWMutex("doc").TryAcquireRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := newFence(t, dial(t, srv.Addr(), sessionTimeout)).RWMutex("doc").TryAcquireRead(ctx)
	if err != nil {
		t.Fatalf("second reader: %v", err)
	}
	// The writer calls the driver's Acquire, so that its one znode is
	// the one the test sees queued.
	wctx, cancelWriter := context.WithCancel(ctx)
	writerDone := make(chan error, 1)
	go func() {
		_, err := dial(t, srv.Addr(), sessionTimeout).Acquire(wctx, fence.Request{Key: "doc", Owner: "writer", TTL: ttl, Kind: fence.KindWrite})
		writerDone <- err
	}()
	waitKindChildren(t, conn, d0, "doc", "rw", 3)
	reader := newFence(t, dial(t, srv.Addr(), sessionTimeout))
	if _, err := reader.RWMutex("doc").TryAcquireRead(ctx); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("TryAcquireRead behind a waiting writer: %v; want ErrHeld", err)
	}
	readerDone := make(chan *fence.Lease, 1)
	go func() {
		l, err := reader.RWMutex("doc").AcquireRead(ctx)
		if err != nil {
			t.Errorf("reader behind the writer: %v", err)
		}
		readerDone <- l
	}()
	waitKindChildren(t, conn, d0, "doc", "rw", 4)
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
			if l.Token() <= max(r1.Token(), r2.Token()) {
				t.Errorf("reader's token %d not above the earlier readers' %d, %d", l.Token(), r1.Token(), r2.Token())
			}
			_ = l.Release(ctx)
		}
	case <-time.After(3 * ttl):
		t.Fatal("the cancelled writer still keeps the reader out")
	}
	_ = r1.Release(ctx)
	_ = r2.Release(ctx)
	if e := kindChildren(t, conn, d0, "doc", "rw"); len(e) != 0 {
		t.Errorf("rw queue after everyone left: %q", e)
	}
}
