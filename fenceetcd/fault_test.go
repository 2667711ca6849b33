package fenceetcd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceetcd"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newDriver returns a driver with its own etcd client, closed at the end
// of the test.
func newDriver(t *testing.T, endpoints []string, opts ...fenceetcd.Option) *fenceetcd.Store {
	t.Helper()
	cli := newClient(t, endpoints)
	d := fenceetcd.New(cli, opts...)
	t.Cleanup(func() { d.Close() })
	return d
}

func newFence(t *testing.T, d fence.Driver, opts ...fence.ClientOption) *fence.Client {
	t.Helper()
	c := fence.New(d, append([]fence.ClientOption{fence.WithTTL(ttl)}, opts...)...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

func entries(t *testing.T, ctx context.Context, cli *clientv3.Client, d *fenceetcd.Store, key string) []string {
	t.Helper()
	resp, err := cli.Get(ctx, d.Dir(key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

// leaseOf returns the etcd lease of the n-th entry (0: the holder) of key's
// queue.
func leaseOf(t *testing.T, ctx context.Context, cli *clientv3.Client, d *fenceetcd.Store, key string, n int) clientv3.LeaseID {
	t.Helper()
	resp, err := cli.Get(ctx, d.Dir(key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) <= n {
		t.Fatalf("queue of %q has %d entries; want more than %d", key, len(resp.Kvs), n)
	}
	return clientv3.LeaseID(resp.Kvs[n].Lease)
}

// waitEntries waits until key's queue has n entries.
func waitEntries(t *testing.T, ctx context.Context, cli *clientv3.Client, d *fenceetcd.Store, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(entries(t, ctx, cli, d, key)) != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue of %q: %q; want %d entries", key, entries(t, ctx, cli, d, key), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rpcCounter counts the unary RPCs a client makes, by method.
type rpcCounter struct {
	mu    sync.Mutex
	calls []string
}

func (r *rpcCounter) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	r.mu.Lock()
	r.calls = append(r.calls, method)
	r.mu.Unlock()
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (r *rpcCounter) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.calls
	r.calls = nil
	return c
}

func TestOneTransactionPerOperation(t *testing.T) {
	srv := testserver.Etcd(t)
	ctx := ctxT(t)
	var rpcs rpcCounter
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(rpcs.intercept)},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	d := fenceetcd.New(cli)
	defer d.Close()
	req := func(owner string) fence.Request {
		return fence.Request{Key: "one-rpc", Owner: owner, TTL: 10 * time.Second}
	}
	// The first acquisition grants the session lease.
	c, err := d.TryAcquire(ctx, req("warm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	rpcs.take()

	c, err = d.TryAcquire(ctx, req("a"))
	if err != nil {
		t.Fatal(err)
	}
	if got := rpcs.take(); len(got) != 1 || !strings.HasSuffix(got[0], "/Txn") {
		t.Errorf("uncontended TryAcquire made RPCs %q; want one Txn", got)
	}
	_, err = d.TryAcquire(ctx, req("b"))
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Owner != "a" || held.Holder.Token != c.Token() {
		t.Errorf("contended TryAcquire: %v; want a *HeldError naming owner a, token %d", err, c.Token())
	}
	if got := rpcs.take(); len(got) != 1 {
		t.Errorf("contended TryAcquire made RPCs %q; want one Txn", got)
	}
	if e := entries(t, ctx, cli, d, "one-rpc"); len(e) != 1 {
		t.Errorf("after a failed TryAcquire the queue is %q; want only the holder", e)
	}
	rpcs.take()
	if err := c.Extend(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := rpcs.take(); len(got) != 1 {
		t.Errorf("Extend with a fresh session made RPCs %q; want one Txn", got)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if got := rpcs.take(); len(got) != 1 {
		t.Errorf("Release made RPCs %q; want one Txn", got)
	}
	b, err := d.Acquire(ctx, req("c"))
	if err != nil {
		t.Fatal(err)
	}
	if got := rpcs.take(); len(got) != 1 {
		t.Errorf("uncontended blocking Acquire made RPCs %q; want one Txn", got)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestExtendRefusesWhenEntryGone(t *testing.T) {
	srv := testserver.Etcd(t)
	ctx := ctxT(t)
	cli := newClient(t, srv.Endpoints())
	d := newDriver(t, srv.Endpoints())
	c, err := d.TryAcquire(ctx, fence.Request{Key: "gone", Owner: "o", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Extend(ctx, ttl); err != nil {
		t.Fatalf("Extend of a held claim: %v", err)
	}
	if _, err := cli.Delete(ctx, d.Dir("gone"), clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	if err := c.Extend(ctx, ttl); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Extend after the holder entry was deleted: %v; want ErrNotHeld", err)
	}
	if err := c.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Release after the holder entry was deleted: %v; want ErrNotHeld", err)
	}
}

func TestKeysDoNotNest(t *testing.T) {
	srv := testserver.Etcd(t)
	ctx := ctxT(t)
	a := newFence(t, newDriver(t, srv.Endpoints(), fenceetcd.WithPrefix("p")))
	b := newFence(t, newDriver(t, srv.Endpoints(), fenceetcd.WithPrefix("p/")))
	d := newDriver(t, srv.Endpoints(), fenceetcd.WithPrefix("p"))
	if strings.HasPrefix(d.Dir("a/b"), d.Dir("a")) || strings.HasPrefix(d.Dir("a"), d.Dir("a/b")) {
		t.Errorf("Dir(a) = %q and Dir(a/b) = %q nest", d.Dir("a"), d.Dir("a/b"))
	}
	la, err := a.TryAcquire(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	lab, err := b.TryAcquire(ctx, "a/b")
	if err != nil {
		t.Fatalf("TryAcquire(a/b) while a is held: %v", err)
	}
	if h, err := a.Inspect(ctx, "a"); err != nil || h.Owner != la.Owner() {
		t.Errorf("Inspect(a) = %+v, %v; want owner %s", h, err, la.Owner())
	}
	if h, err := a.Inspect(ctx, "a/b"); err != nil || h.Owner != lab.Owner() {
		t.Errorf("Inspect(a/b) = %+v, %v; want owner %s", h, err, lab.Owner())
	}
	hs, err := a.List(ctx, "a/")
	if err != nil || len(hs) != 1 || hs[0].Key != "a/b" {
		t.Errorf("List(a/) = %+v, %v; want only a/b", hs, err)
	}
	if err := la.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lab.Err(); err != nil {
		t.Errorf("releasing a ended a/b: %v", err)
	}
	_ = lab.Release(ctx)
}

// TestWaiterWithEndedSessionStops is etcd#19597 (a waiter keeps waiting
// after its session expired) and etcd#11456 (a lock is granted after the
// waiter's lease expired): a driver's waiter whose lease is revoked must
// stop waiting with an error, never return a lease. The error matches
// fence.ErrUnavailable: a Client's Acquire tries again, with a new entry.
func TestWaiterWithEndedSessionStops(t *testing.T) {
	for _, release := range []bool{false, true} {
		t.Run(fmt.Sprintf("release=%v", release), func(t *testing.T) {
			srv := testserver.Etcd(t)
			ctx := ctxT(t)
			cli := newClient(t, srv.Endpoints())
			d0 := newDriver(t, srv.Endpoints())
			holder := newFence(t, d0)
			key := "waiter-session"
			l, err := holder.TryAcquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			waiter := newDriver(t, srv.Endpoints())
			got := make(chan error, 1)
			var granted atomic.Pointer[fence.Claim]
			go func() {
				c, err := waiter.Acquire(ctx, fence.Request{Key: key, Owner: "waiter", TTL: ttl})
				if err == nil {
					granted.Store(&c)
				}
				got <- err
			}()
			waitEntries(t, ctx, cli, d0, key, 2)
			if _, err := cli.Revoke(ctx, leaseOf(t, ctx, cli, d0, key, 1)); err != nil {
				t.Fatal(err)
			}
			if release {
				// The holder leaves at once: the waiter must not take over
				// with the entry its ended session lost.
				if err := l.Release(ctx); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case err := <-got:
				if err == nil {
					t.Fatalf("waiter whose session was revoked got the lease (token %d)", (*granted.Load()).Token())
				}
				if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("waiter ended with %v; want the session's end", err)
				}
				if !errors.Is(err, fence.ErrUnavailable) {
					t.Errorf("waiter ended with %v; want it to match fence.ErrUnavailable, so that the Client tries again", err)
				}
				t.Logf("waiter stopped: %v", err)
			case <-time.After(3 * ttl):
				t.Fatalf("waiter still waiting %v after its session lease was revoked", 3*ttl)
			}
			if !release {
				if err := l.Err(); err != nil {
					t.Errorf("holder lost its lease: %v", err)
				}
				_ = l.Release(ctx)
			}
			l3, err := holder.TryAcquire(ctx, key)
			if err != nil {
				t.Fatalf("TryAcquire after the waiter's session ended and the holder left: %v", err)
			}
			_ = l3.Release(ctx)
		})
	}
}

// TestClusterMemberKilled kills each member of a 3-member cluster in turn
// (so also the one the client's streams use, and the leader) while a lease
// is held: the client fails over, the lease survives, tokens keep
// increasing.
func TestClusterMemberKilled(t *testing.T) {
	cluster := testserver.EtcdCluster(t, 3)
	ctx := ctxT(t)
	const ttl = 5 * time.Second
	c := newFence(t, newDriver(t, cluster.Endpoints()), fence.WithTTL(ttl))
	held, err := c.TryAcquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	last := held.Token()
	for _, m := range cluster.Members {
		m.Kill()
		// Longer than the lease's validity: only renewals through the
		// remaining members keep it.
		time.Sleep(ttl + time.Second)
		if err := held.Err(); err != nil {
			t.Fatalf("lease lost after member %s was killed: %v", m.Name(), err)
		}
		l, err := c.Acquire(ctx, "other", fence.WithWait(30*time.Second))
		if err != nil {
			t.Fatalf("Acquire with member %s down: %v", m.Name(), err)
		}
		if l.Token() <= last {
			t.Errorf("token %d with member %s down, after %d", l.Token(), m.Name(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Errorf("Release with member %s down: %v", m.Name(), err)
		}
		m.Restart()
	}
	if err := held.Err(); err != nil {
		t.Fatalf("lease lost: %v", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// TestCloseWhileEtcdIsDown: Close returns even when an acquisition is
// stuck granting a session on an unreachable cluster.
func TestCloseWhileEtcdIsDown(t *testing.T) {
	srv := testserver.Etcd(t)
	cli := newClient(t, srv.Endpoints())
	d := fenceetcd.New(cli)
	srv.Stop()
	defer srv.Cont()
	errc := make(chan error, 1)
	go func() {
		_, err := d.TryAcquire(context.Background(), fence.Request{Key: "k", Owner: "o", TTL: ttl})
		errc <- err
	}()
	time.Sleep(500 * time.Millisecond)
	closed := make(chan struct{})
	go func() { d.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(20 * time.Second):
		t.Fatal("Close blocked by an acquisition waiting for an unreachable cluster")
	}
	if err := <-errc; err == nil {
		t.Errorf("TryAcquire on an unreachable cluster succeeded")
	}
}
