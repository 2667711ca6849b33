package fenceetcd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceetcd"
	"github.com/fencing/fence/internal/testserver"
)

// kindEntries returns the entries of key's queue of one kind ("sem" or
// "rw"), in queue order.
func kindEntries(t *testing.T, ctx context.Context, cli *clientv3.Client, d *fenceetcd.Driver, key, kind string) []string {
	t.Helper()
	resp, err := cli.Get(ctx, strings.TrimSuffix(d.Dir(key), "/")+"%"+kind+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

func waitKindEntries(t *testing.T, ctx context.Context, cli *clientv3.Client, d *fenceetcd.Driver, key, kind string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(kindEntries(t, ctx, cli, d, key, kind)) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%s queue of %q: %q; want %d entries", kind, key, kindEntries(t, ctx, cli, d, key, kind), n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A lock, a semaphore and a reader-writer lock on one key are separate
// queues; List and Inspect see the lock only; a refused TryAcquire leaves
// no entry behind.
func TestKindsAreSeparate(t *testing.T) {
	srv := testserver.Etcd(t)
	ctx := ctxT(t)
	cli := newClient(t, srv.Endpoints())
	d := newDriver(t, srv.Endpoints())
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
	other := newFence(t, newDriver(t, srv.Endpoints()))
	if _, err := other.Semaphore("k", 1).TryAcquire(ctx); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("full semaphore: %v; want ErrHeld", err)
	}
	if _, err := other.RWMutex("k").TryAcquireRead(ctx); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("reader beside a writer: %v; want ErrHeld", err)
	}
	if e := kindEntries(t, ctx, cli, d, "k", "sem"); len(e) != 1 {
		t.Errorf("semaphore queue after a refused TryAcquire: %q", e)
	}
	if e := kindEntries(t, ctx, cli, d, "k", "rw"); len(e) != 1 {
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

// A semaphore slot whose holder's session ends goes to the next waiter,
// and the holder's lease is lost.
func TestSemaphoreHolderSessionRevoked(t *testing.T) {
	srv := testserver.Etcd(t)
	ctx := ctxT(t)
	cli := newClient(t, srv.Endpoints())
	d0 := newDriver(t, srv.Endpoints())
	h, err := newFence(t, d0).Semaphore("s", 1).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *fence.Lease, 1)
	go func() {
		l, err := newFence(t, newDriver(t, srv.Endpoints())).Semaphore("s", 1).Acquire(ctx)
		if err != nil {
			t.Errorf("waiter: %v", err)
		}
		got <- l
	}()
	waitKindEntries(t, ctx, cli, d0, "s", "sem", 2)
	resp, err := cli.Get(ctx, kindEntries(t, ctx, cli, d0, "s", "sem")[0])
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatal(resp, err)
	}
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
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
		t.Fatal("waiter not granted the slot of a revoked holder")
	}
	select {
	case <-h.Done():
	case <-time.After(3 * ttl):
		t.Error("revoked holder's lease still valid")
	}
}

// A waiting writer keeps readers that come after it out (FIFO), readers
// ahead of it keep it out, and a writer that gives up lets the readers
// behind it in at once: its entry is gone.
func TestRWWriterPreference(t *testing.T) {
	srv := testserver.Etcd(t)
	ctx := ctxT(t)
	cli := newClient(t, srv.Endpoints())
	d0 := newDriver(t, srv.Endpoints())
	r1, err := newFence(t, d0).RWMutex("doc").TryAcquireRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancelWriter := context.WithCancel(ctx)
	writerDone := make(chan error, 1)
	go func() {
		_, err := newFence(t, newDriver(t, srv.Endpoints())).RWMutex("doc").AcquireWrite(wctx)
		writerDone <- err
	}()
	waitKindEntries(t, ctx, cli, d0, "doc", "rw", 2)
	reader := newFence(t, newDriver(t, srv.Endpoints()))
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
	waitKindEntries(t, ctx, cli, d0, "doc", "rw", 3)
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
	case <-time.After(3 * ttl):
		t.Fatal("the cancelled writer still keeps the reader out")
	}
	_ = r1.Release(ctx)
	if e := kindEntries(t, ctx, cli, d0, "doc", "rw"); len(e) != 0 {
		t.Errorf("rw queue after everyone left: %q", e)
	}
}
