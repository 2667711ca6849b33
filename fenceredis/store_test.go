package fenceredis

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// Restarting a Redis that keeps nothing on disk loses every counter; the
// time seed must still keep tokens above every earlier one, whether the
// key was free or held when the server went down.
func TestTokensSurviveEmptyRestart(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	c := mustClient(t, mustOpen(t, connectSingle(srv)), fence.WithTTL(2*time.Second))
	var last int64
	next := func(how string, l *fence.Lease) {
		t.Helper()
		t.Logf("%s: token %d", how, l.Token())
		if l.Token() <= last {
			t.Fatalf("%s: token %d is not above the earlier %d", how, l.Token(), last)
		}
		last = l.Token()
	}
	for round := range 3 {
		for range 3 {
			l, err := c.TryAcquire(ctx, "k")
			if err != nil {
				t.Fatalf("round %d: TryAcquire: %v", round, err)
			}
			next("round "+strconv.Itoa(round), l)
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		srv.Restart()
	}

	// Held across the restart: the holder loses it (the server forgot it)
	// and the next holder's token is still higher.
	l, err := c.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	next("held across restart", l)
	srv.Restart()
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("lease not lost after the server restarted empty")
	}
	l2, err := c.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	next("after the holder's server restarted", l2)
	_ = l2.Release(ctx)
}

// Counters expire once their lock has been gone for the retention, and the
// next token is still higher.
func TestTokenCounterExpires(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	const retention = 200 * time.Millisecond
	c := mustClient(t, mustOpen(t, connectSingle(srv), WithTokenRetention(retention)), fence.WithTTL(300*time.Millisecond))
	rdb := newClient(srv.Addr())
	defer rdb.Close()
	n := lockNames(DefaultPrefix, "once")

	l, err := c.TryAcquire(ctx, "once")
	if err != nil {
		t.Fatal(err)
	}
	if pttl := rdb.PTTL(ctx, n.counter).Val(); pttl <= 0 || pttl > 300*time.Millisecond+retention {
		t.Errorf("counter PTTL %v; want within (0, ttl + retention]", pttl)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Exists(ctx, n.counter).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("counter %s still there 10s after its lock was released (retention %v)", n.counter, retention)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if keys := rdb.Keys(ctx, "*").Val(); len(keys) != 0 {
		t.Errorf("keys left after the counter expired: %q", keys)
	}
	l2, err := c.TryAcquire(ctx, "once")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after the counter expired is not above the earlier %d", l2.Token(), l.Token())
	}
	_ = l2.Release(ctx)
}

// commandCalls returns how often the server ran cmd.
func commandCalls(t *testing.T, ctx context.Context, rdb *redis.Client, cmd string) int {
	t.Helper()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls=")
		if ok {
			n, _ := strconv.Atoi(rest[:strings.IndexByte(rest, ',')])
			return n
		}
	}
	return 0
}

// Scripts run by EVALSHA, but a Store's first call of each by EVAL, which
// loads it; a restarted server has none cached and answers NOSCRIPT, and
// the driver falls back to EVAL once, which caches it again.
func TestScriptsReloadedAfterRestart(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	c := mustClient(t, mustOpen(t, connectSingle(srv)))
	rdb := newClient(srv.Addr())
	defer rdb.Close()

	cycle := func() {
		t.Helper()
		l, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // the Store's first: EVAL at once, which loads each script
	if evals, shas := commandCalls(t, ctx, rdb, "eval"), commandCalls(t, ctx, rdb, "evalsha"); evals != 2 || shas != 0 {
		t.Errorf("a Store's first acquire and release ran %d EVALs and %d EVALSHAs; want 2 and 0 (no NOSCRIPT round trip)", evals, shas)
	}
	srv.Restart()
	cycle() // NOSCRIPT for acquire and release, then EVAL for each
	if evals := commandCalls(t, ctx, rdb, "eval"); evals != 2 {
		t.Errorf("after a restart, one acquire and one release ran EVAL %d times; want 2 (one NOSCRIPT fallback each)", evals)
	}
	shas := commandCalls(t, ctx, rdb, "evalsha")
	cycle()
	if evals := commandCalls(t, ctx, rdb, "eval"); evals != 2 {
		t.Errorf("once loaded, scripts ran by EVAL again (%d EVALs); want EVALSHA only", evals)
	}
	if got := commandCalls(t, ctx, rdb, "evalsha"); got != shas+2 {
		t.Errorf("EVALSHA calls went from %d to %d for one acquire and release; want +2", shas, got)
	}
}

// A holder whose lock is deleted behind its back loses its lease within
// one renew interval, on every kind of deployment.
func TestDeletedLockLostWithinRenewInterval(t *testing.T) {
	deployments := map[string]func(t *testing.T) string{
		"single":   func(t *testing.T) string { return connectSingle(testserver.Redis(t)) },
		"cluster":  func(t *testing.T) string { return connectCluster(testserver.RedisCluster(t, 3)) },
		"redlock3": func(t *testing.T) string { return connectRedlock(testserver.Redises(t, 3)) },
	}
	for name, start := range deployments {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t)
			connect := start(t)
			const ttl, renew = 3 * time.Second, time.Second
			c := mustClient(t, mustOpen(t, connect), fence.WithTTL(ttl), fence.WithRenewInterval(renew))
			l, err := c.TryAcquire(ctx, "victim{x}")
			if err != nil {
				t.Fatal(err)
			}
			if err := newRaw(t, connect).deleteLock(ctx, "victim{x}"); err != nil {
				t.Fatal(err)
			}
			deleted := time.Now()
			slack := time.Second // scheduling on a loaded machine
			select {
			case <-l.Done():
				t.Logf("loss noticed %v after the delete", time.Since(deleted))
			case <-time.After(renew + slack):
				t.Fatalf("lease context not cancelled %v after its lock was deleted (renew interval %v)", time.Since(deleted), renew)
			}
			var lost *fence.LostError
			if !errors.As(l.Err(), &lost) || lost.Reason != fence.LossRefused {
				t.Errorf("cause %v; want a *LostError with reason %q", l.Err(), fence.LossRefused)
			}
		})
	}
}

func pubsubClients(t *testing.T, ctx context.Context, addr string) int {
	t.Helper()
	rdb := newClient(addr)
	defer rdb.Close()
	list, err := rdb.ClientList(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for line := range strings.Lines(list) {
		// flags=P marks a client in pub/sub mode.
		for _, f := range strings.Fields(line) {
			if v, ok := strings.CutPrefix(f, "flags="); ok && strings.Contains(v, "P") {
				n++
			}
		}
	}
	return n
}

// Every waiter of a Store shares one subscription connection, and the
// connection goes when the last waiter does.
func TestWatchSharesOneConnection(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	s := mustOpen(t, connectSingle(srv)).(*Store)
	other := mustClient(t, mustOpen(t, connectSingle(srv)))

	wctx, stop := context.WithCancel(ctx)
	var chans []<-chan struct{}
	keys := []string{"a", "b", "c", "d", "e"}
	for range 3 {
		for _, k := range keys {
			ch, err := s.Watch(wctx, k)
			if err != nil {
				t.Fatal(err)
			}
			chans = append(chans, ch)
		}
	}
	if n := pubsubClients(t, ctx, srv.Addr()); n != 1 {
		t.Errorf("%d pub/sub connections for 15 waiters on 5 keys; want 1", n)
	}
	l, err := other.TryAcquire(ctx, "c")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for i, ch := range chans {
		if keys[i%len(keys)] != "c" {
			continue
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %d on c not woken by its release", i)
		}
	}
	stop()
	deadline := time.Now().Add(10 * time.Second)
	for pubsubClients(t, ctx, srv.Addr()) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("pub/sub connection still open 10s after every wait ended")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// On a Cluster, waiters share one connection per master.
func TestWatchClusterOneConnectionPerMaster(t *testing.T) {
	ctx := testCtx(t)
	cl := testserver.RedisCluster(t, 3)
	s := mustOpen(t, connectCluster(cl)).(*Store)
	other := mustClient(t, mustOpen(t, connectCluster(cl)))
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	chans := map[string]<-chan struct{}{}
	for i := range 30 {
		key := "k" + strconv.Itoa(i)
		ch, err := s.Watch(wctx, key)
		if err != nil {
			t.Fatal(err)
		}
		chans[key] = ch
	}
	total := 0
	for _, addr := range cl.Addrs() {
		n := pubsubClients(t, ctx, addr)
		if n > 1 {
			t.Errorf("master %s has %d pub/sub connections; want at most 1", addr, n)
		}
		total += n
	}
	if total == 0 || total > len(cl.Addrs()) {
		t.Errorf("%d pub/sub connections for 30 keys on %d masters", total, len(cl.Addrs()))
	}
	for key, ch := range chans {
		l, err := other.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter on %s not woken by its release", key)
		}
	}
}

// Watch returns only once the subscription is in effect: a release right
// after it is heard. The Watcher itself never polls, so a missed message
// would leave the channel silent.
func TestWatchHearsReleaseRightAfterSubscribing(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	other := mustClient(t, mustOpen(t, connectSingle(srv)))
	for i := range 20 {
		s := mustOpen(t, connectSingle(srv)).(*Store)
		key := "k" + strconv.Itoa(i)
		l, err := other.TryAcquire(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		wctx, stop := context.WithCancel(ctx)
		ch, err := s.Watch(wctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: release right after Watch returned was not heard", i)
		}
		stop()
	}
}

// A subscription survives a restart of the server: go-redis reconnects
// and subscribes again, waiters are woken in case they missed a release,
// and later releases are heard.
func TestWatchSurvivesRestart(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	s := mustOpen(t, connectSingle(srv)).(*Store)
	other := mustClient(t, mustOpen(t, connectSingle(srv)))
	ch, err := s.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	srv.Restart()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatal("no wake-up after the server restarted (resubscription)")
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		l, err := other.TryAcquire(ctx, "k")
		if err != nil {
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		break
	}
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("release after the restart not heard")
	}
}

// Inspect, List and a HeldError carry the holder's owner, token and
// metadata, for every shape of lock (the metadata travels in the lock's
// value or in the kinds' info hash), and a release leaves nothing but the
// token counter.
func TestHolderMetadata(t *testing.T) {
	srv := testserver.Redis(t)
	shapes := []struct {
		name    string
		connect func(t *testing.T) string
		acquire func(ctx context.Context, c *fence.Client) (*fence.Lease, error)
		contend func(ctx context.Context, c *fence.Client) (*fence.Lease, error) // nil: acquire
		inspect bool                                                             // Inspect and List report it (plain locks only)
	}{
		{"lock", func(*testing.T) string { return connectSingle(srv) },
			func(ctx context.Context, c *fence.Client) (*fence.Lease, error) { return c.TryAcquire(ctx, "meta") }, nil, true},
		{"redlock", func(t *testing.T) string { _, connect, _ := redlockSetup(t, 3); return connect },
			func(ctx context.Context, c *fence.Client) (*fence.Lease, error) { return c.TryAcquire(ctx, "meta") }, nil, true},
		{"semaphore", func(*testing.T) string { return connectSingle(srv) },
			func(ctx context.Context, c *fence.Client) (*fence.Lease, error) {
				return c.Semaphore("meta-sem", 1).TryAcquire(ctx)
			}, nil, false},
		{"writer", func(*testing.T) string { return connectSingle(srv) },
			func(ctx context.Context, c *fence.Client) (*fence.Lease, error) {
				return c.RWMutex("meta-rw").TryAcquireWrite(ctx)
			},
			// A reader, not a second writer, which would leave its
			// waiting mark behind for a while.
			func(ctx context.Context, c *fence.Client) (*fence.Lease, error) {
				return c.RWMutex("meta-rw").TryAcquireRead(ctx)
			}, false},
	}
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			ctx := testCtx(t)
			connect := sh.connect(t)
			a := mustClient(t, mustOpen(t, connect), fence.WithMetadata(map[string]string{"job": "nightly"}))
			b := mustClient(t, mustOpen(t, connect))
			l, err := sh.acquire(ctx, a)
			if err != nil {
				t.Fatal(err)
			}
			check := func(what string, h fence.Holder) {
				t.Helper()
				if h.Owner != l.Owner() || h.Token != l.Token() || h.Meta["job"] != "nightly" || h.Meta["pid"] == "" || h.ExpiresIn <= 0 {
					t.Errorf("%s: holder = %+v; want owner %s token %d, job=nightly, a pid and a time left", what, h, l.Owner(), l.Token())
				}
			}
			contend := sh.contend
			if contend == nil {
				contend = sh.acquire
			}
			_, err = contend(ctx, b)
			var held *fence.HeldError
			if !errors.As(err, &held) || held.Holder == nil {
				t.Fatalf("TryAcquire of a held key: %v", err)
			}
			check("HeldError", *held.Holder)
			if !strings.Contains(err.Error(), "token "+strconv.FormatInt(l.Token(), 10)) {
				t.Errorf("error %q does not show the token", err)
			}
			if sh.inspect {
				h, err := b.Inspect(ctx, "meta")
				if err != nil {
					t.Fatal(err)
				}
				check("Inspect", h)
				hs, err := b.List(ctx, "meta")
				if err != nil || len(hs) != 1 {
					t.Fatalf("List = %+v, %v; want the one holder", hs, err)
				}
				check("List", hs[0])
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
			left, err := newRaw(t, connect).leftovers(ctx, "meta")
			if err != nil || len(left) != 0 {
				t.Errorf("keys left after the release: %q, %v", left, err)
			}
		})
	}
}

// Watch waits for the server: with the server paused it cannot confirm
// the subscription, so Watch fails (and the Client polls) rather than
// return a subscription that may not be in effect yet.
func TestWatchWaitsForTheServer(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	s := mustOpen(t, connectSingle(srv)).(*Store)
	// A first waiter opens the subscription connection.
	if _, err := s.Watch(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	defer srv.Cont()
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := s.Watch(wctx, "second"); err == nil {
		t.Fatal("Watch succeeded while the server was paused: it cannot have confirmed the subscription")
	}
	srv.Cont()
	if _, err := s.Watch(ctx, "third"); err != nil {
		t.Fatalf("Watch after the server resumed: %v", err)
	}
}
