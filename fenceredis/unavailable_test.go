package fenceredis

import (
	"context"
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// The server's replies that say it cannot answer for now make an
// acquisition's error match fence.ErrUnavailable, on a real server: a
// replica whose master is gone (READONLY, and MASTERDOWN when it serves
// no stale data) and a script running past the busy threshold (BUSY). A
// held key does not.
func TestServerRepliesUnavailable(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	admin := newClient(srv.Addr())
	t.Cleanup(func() { admin.Close() })
	s := mustOpen(t, connectSingle(srv)).(*Store)
	req := func(key string) fence.Request { return fence.Request{Key: key, Owner: "o", TTL: time.Minute} }

	// A held key stays a HeldError.
	if _, err := s.TryAcquire(ctx, req("held")); err != nil {
		t.Fatal(err)
	}
	other := req("held")
	other.Owner = "other"
	_, err := s.TryAcquire(ctx, other)
	if !errors.Is(err, fence.ErrHeld) || errors.Is(err, fence.ErrUnavailable) {
		t.Errorf("TryAcquire of a held key: %v; want ErrHeld, not ErrUnavailable", err)
	}

	check := func(what string, err error, is func(error) bool) {
		t.Helper()
		switch {
		case err == nil:
			t.Errorf("%s: TryAcquire succeeded", what)
		case !is(err):
			t.Errorf("%s: TryAcquire: %v; not the reply expected", what, err)
		case !errors.Is(err, fence.ErrUnavailable):
			t.Errorf("%s: TryAcquire: %v; want an error matching fence.ErrUnavailable", what, err)
		default:
			t.Logf("%s: %v", what, err)
		}
	}

	// A replica of a master that is gone: a port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if err := admin.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(gone)).Err(); err != nil {
		t.Fatal(err)
	}
	_, err = s.TryAcquire(ctx, req("replica"))
	check("replica", err, redis.IsReadOnlyError)
	if err := admin.ConfigSet(ctx, "replica-serve-stale-data", "no").Err(); err != nil {
		t.Fatal(err)
	}
	_, err = s.TryAcquire(ctx, req("replica"))
	check("replica serving no stale data", err, redis.IsMasterDownError)
	if err := admin.ConfigSet(ctx, "replica-serve-stale-data", "yes").Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ReplicaOf(ctx, "NO", "ONE").Err(); err != nil {
		t.Fatal(err)
	}

	// A script that runs for a second, past a busy threshold of 100ms.
	if err := admin.ConfigSet(ctx, "busy-reply-threshold", "100").Err(); err != nil {
		t.Fatal(err)
	}
	busy := make(chan error, 1)
	go func() {
		busy <- admin.Eval(context.Background(), `
local t0 = redis.call('TIME')
while true do
  local t = redis.call('TIME')
  if (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > 1000000 then
    return 1
  end
end`, nil).Err()
	}()
	time.Sleep(300 * time.Millisecond)
	_, err = s.TryAcquire(ctx, req("busy"))
	check("busy", err, func(err error) bool { return redis.HasErrorPrefix(err, "BUSY ") })
	if err := <-busy; err != nil {
		t.Errorf("busy script: %v", err)
	}
}

// TestMovedUnavailable: a MOVED reply that reaches the driver (go-redis
// passes one on after its redirects, while a Cluster's nodes disagree on
// a slot after a failover) makes an acquisition's error match
// fence.ErrUnavailable, so that a waiter waits on. A client of one node of
// a Cluster, which follows no redirect, gets one for a key of another
// node's slot.
func TestMovedUnavailable(t *testing.T) {
	ctx := testCtx(t)
	c := testserver.RedisCluster(t, 3)
	s := mustOpen(t, connectSingle(c.Nodes[0])).(*Store)
	for i := range 100 {
		key := "moved-" + strconv.Itoa(i)
		_, err := s.TryAcquire(ctx, fence.Request{Key: key, Owner: "o", TTL: time.Minute})
		if _, moved := redis.IsMovedError(err); !moved {
			continue // a slot of node 0 (or another error, checked below)
		}
		if !errors.Is(err, fence.ErrUnavailable) {
			t.Fatalf("TryAcquire with MOVED: %v; want an error matching fence.ErrUnavailable", err)
		}
		t.Logf("%s: %v", key, err)
		return
	}
	t.Fatal("no key of 100 got MOVED from one node of a three-master Cluster")
}
