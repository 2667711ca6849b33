package fencezk_test

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencezk"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// The environment of a waiter process (see runWaiterProcess).
const (
	envWaiterAddr = "FENCEZK_TEST_WAITER_ADDR"
	envWaiterKey  = "FENCEZK_TEST_WAITER_KEY"
)

// runWaiterProcess is the body of the waiter process: it waits for the
// key until it is killed.
func runWaiterProcess(t *testing.T) {
	d, err := fencezk.Dial([]string{os.Getenv(envWaiterAddr)}, sessionTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c := fence.New(d, fence.WithTTL(ttl))
	l, err := c.Acquire(ctxT(t), os.Getenv(envWaiterKey))
	if err == nil {
		t.Errorf("waiter process got the key (token %d); it was to be killed while waiting", l.Token())
	}
}

// TestDeadWaiterCostsAtMostItsSession is the bound docs/zookeeper.md
// states: a waiting process killed with SIGKILL keeps its child (an
// ephemeral znode of its session) in the queue until its session
// expires, so once the holder leaves, the next contender waits for that,
// and no longer than the session timeout after the kill (plus slack).
func TestDeadWaiterCostsAtMostItsSession(t *testing.T) {
	if os.Getenv(envWaiterKey) != "" {
		runWaiterProcess(t)
		return
	}
	srv := testserver.ZooKeeper(t)
	ctx := ctxT(t)
	key := "dead-waiter"
	d := dial(t, srv.Addr(), sessionTimeout)
	conn := rawConn(t, srv.Addr())
	holder := newFence(t, d)
	held, err := holder.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	waiter := testserver.Rerun(t, envWaiterAddr+"="+srv.Addr(), envWaiterKey+"="+key)
	// The waiter's child: not the one its TryAcquire puts and deletes
	// again before the wait, but one that stays (the same two children
	// for half a second).
	deadline := time.Now().Add(20 * time.Second)
	var last []string
	for stable := 0; stable < 10; time.Sleep(50 * time.Millisecond) {
		kids := children(t, conn, d, key)
		if len(kids) == 2 && slices.Equal(kids, last) {
			stable++
		} else {
			stable = 0
		}
		last = kids
		if time.Now().After(deadline) {
			t.Fatalf("the waiter process queued no child that stays: %q; its output:\n%s", kids, waiter.Output())
		}
	}
	waiter.Kill()
	killed := time.Now()
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// The dead waiter is first now, and named as holder until its
	// session expires.
	if h, err := holder.Inspect(ctx, key); err != nil || h.Meta["pid"] != strconv.Itoa(waiter.Pid()) {
		t.Logf("Inspect right after the holder left: %+v, %v", h, err)
	}
	next := newFence(t, dial(t, srv.Addr(), sessionTimeout))
	const slack = 10 * time.Second
	l, err := next.Acquire(ctx, key, fence.WithWait(sessionTimeout+slack))
	if err != nil {
		t.Fatalf("next contender: %v after %v", err, time.Since(killed))
	}
	took := time.Since(killed)
	t.Logf("next contender got the key %v after the waiter was killed (session timeout %v)", took, sessionTimeout)
	if took > sessionTimeout+slack {
		t.Errorf("a dead waiter delayed the next contender by %v; want at most the session timeout %v (+%v)", took, sessionTimeout, slack)
	}
	if err := l.Release(ctx); err != nil {
		t.Error(err)
	}
}
