package fencezk_test

import (
	"context"
	"errors"
	"slices"
	"strings"
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
