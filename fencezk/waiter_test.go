package fencezk_test

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
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

// TestWaiterQueueDeleted: a waiting Acquire whose queue is deleted behind
// fence's back (the whole root, its entry with it, in the same session)
// neither hangs nor holds a lease on state that is gone: it fails, saying
// its entry vanished, or, when the deletion removed the holder's znode
// before its own and it was granted in between, its lease is lost at
// once. The holder, whose znode went too, loses its lease.
func TestWaiterQueueDeleted(t *testing.T) {
	ctx := ctxT(t)
	s := testserver.ZooKeeper(t)
	conn := rawConn(t, s.Addr())
	d := dial(t, s.Addr(), sessionTimeout)
	c := newFence(t, d)
	held, err := c.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *fence.Lease
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := c.Acquire(ctx, "k", fence.WithWait(time.Minute))
		done <- result{l, err}
	}()
	for {
		kids, _, err := conn.Children(d.KeyPath("k"))
		if err != nil {
			t.Fatal(err)
		}
		if len(kids) == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	deleteAll(t, conn, parentPath(d.EpochPath()))
	lost := func(what string, l *fence.Lease) {
		t.Helper()
		select {
		case <-l.Done():
		case <-time.After(30 * time.Second):
			t.Errorf("%s whose znode was deleted still holds after 30 s", what)
		}
	}
	select {
	case r := <-done:
		switch {
		case r.err == nil:
			t.Log("granted between the deletion of the holder's znode and its own")
			lost("the waiter granted so", r.l)
		case !strings.Contains(r.err.Error(), "vanished") || errors.Is(r.err, fence.ErrUnavailable):
			t.Errorf("waiting Acquire after its queue was deleted: %v; want an error saying its entry vanished", r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting Acquire still waits 30 s after its queue was deleted")
	}
	lost("the holder", held)
}
