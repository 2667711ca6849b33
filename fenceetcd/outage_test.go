package fenceetcd_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestWaiterWaitsThroughOutage: an Acquire already waiting in the queue
// when etcd becomes unable to answer, for longer than the sessions' TTL
// (so that the waiter's session and waiter lease end while it waits),
// goes on waiting (the driver's errors match fence.ErrUnavailable, and the
// Client tries again) and gets the key once etcd is back and the holder
// has gone: its server killed, or two members of a 3-member cluster
// killed (the one left cannot commit anything).
//
// fencetest's Outage check starts its Acquire during the outage of a
// killed server: the etcd client's requests wait by themselves for a
// connection (clientv3's calls are WaitForReady), so it does not see this.
func TestWaiterWaitsThroughOutage(t *testing.T) {
	t.Run("server", func(t *testing.T) {
		srv := testserver.Etcd(t)
		waitThroughOutage(t, srv.Endpoints(), outage(srv))
	})
	t.Run("quorum", func(t *testing.T) {
		cluster := testserver.EtcdCluster(t, 3)
		waitThroughOutage(t, cluster.Endpoints(), outage(cluster.Members[1:]...))
	})
}

// waitThroughOutage runs TestWaiterWaitsThroughOutage on the etcd at
// endpoints, which outage takes down (as fencetest's Store.Outage).
func waitThroughOutage(t *testing.T, endpoints []string, outage func(*testing.T) (restore func())) {
	ctx := ctxT(t)
	cli := newClient(t, endpoints)
	d0 := newDriver(t, endpoints)
	key := "outage"
	l, err := newFence(t, d0).TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	waiter := newFence(t, newDriver(t, endpoints))
	type result struct {
		l   *fence.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := waiter.Acquire(ctx, key, fence.WithWait(time.Minute))
		got <- result{l, err}
	}()
	waitEntries(t, ctx, cli, d0, key, 2)

	restore := outage(t)
	down := time.Now()
	tctx, cancel := context.WithTimeout(ctx, 2*ttl)
	_, err = newFence(t, newDriver(t, endpoints)).TryAcquire(tctx, "outage-try")
	switch {
	case errors.Is(err, fence.ErrUnavailable):
		t.Logf("TryAcquire during the outage: %v", err)
	case tctx.Err() != nil:
		t.Logf("TryAcquire during the outage waited until its context ended: %v", err)
	default:
		t.Errorf("TryAcquire during the outage: %v; want an error matching fence.ErrUnavailable", err)
	}
	cancel()
	select {
	case r := <-got:
		if r.l != nil {
			_ = r.l.Release(ctx)
		}
		t.Fatalf("Acquire waiting when etcd went down returned during the outage, after %v: %v; want it to wait until etcd answers",
			time.Since(down).Round(time.Millisecond), r.err)
	case <-time.After(time.Until(down.Add(5 * ttl))):
		// The sessions last 1.5 TTL; a waiter whose session ended then
		// tries for as long again to delete its entry.
	}
	restore()
	back := time.Now()
	// Lost in the outage, most likely; its entry goes with its session.
	if err := l.Release(ctx); err != nil && !errors.Is(err, fence.ErrLost) {
		t.Errorf("holder's Release: %v", err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("Acquire, waiting through the outage: %v; want the key once etcd answers", r.err)
		}
		t.Logf("the waiting Acquire got the key %v after etcd came back", time.Since(back).Round(time.Millisecond))
		if err := r.l.Release(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting Acquire did not get the key within 30s of etcd's return")
	}
}
