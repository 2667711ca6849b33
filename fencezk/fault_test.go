package fencezk_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencezk"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func dial(t *testing.T, addr string, session time.Duration, opts ...fencezk.Option) *fencezk.Store {
	t.Helper()
	d, err := fencezk.Dial([]string{addr}, session, opts...)
	if err != nil {
		t.Fatal(err)
	}
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

func waitChildren(t *testing.T, conn *zk.Conn, d *fencezk.Store, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for len(children(t, conn, d, key)) != n {
		if time.Now().After(deadline) {
			t.Fatalf("queue of %q: %q; want %d entries", key, children(t, conn, d, key), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestOneRoundTripUncontended(t *testing.T) {
	// The server's default container cleanup (every minute), so that the
	// key's container stays between the acquisitions: an acquisition that
	// finds it removed creates it again, in two more round trips.
	t.Setenv("JAVA_TOOL_OPTIONS", "")
	srv := testserver.ZooKeeper(t)
	ctx := ctxT(t)
	var (
		mu  sync.Mutex
		ops []int32
	)
	dialer := func(network, addr string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		return &requestCounter{Conn: c, mu: &mu, ops: &ops, first: true}, nil
	}
	conn, _, err := zk.Connect([]string{srv.Addr()}, sessionTimeout, zk.WithDialer(dialer), zk.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	d := fencezk.New(conn, sessionTimeout)
	defer d.Close()
	// requests returns the requests made since the last call, apart from
	// the exists-with-watch a new claim sets up in the background to learn
	// of its loss; it waits a little for that one.
	requests := func() []int32 {
		time.Sleep(100 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		var m []int32
		for _, op := range ops {
			const opExists = 3
			if op != opExists {
				m = append(m, op)
			}
		}
		ops = nil
		return m
	}
	req := func(owner string) fence.Request { return fence.Request{Key: "one", Owner: owner, TTL: ttl} }
	// The first acquisition creates the root and the key's container.
	c, err := d.TryAcquire(ctx, req("warm"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	requests()
	c, err = d.TryAcquire(ctx, req("a"))
	if err != nil {
		t.Fatal(err)
	}
	if got := requests(); len(got) != 1 {
		t.Errorf("uncontended TryAcquire made requests with opcodes %v; want 1", got)
	}
	_, err = d.TryAcquire(ctx, req("b"))
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Owner != "a" || held.Holder.Token != c.Token() {
		t.Errorf("contended TryAcquire: %v; want a *HeldError naming owner a, token %d", err, c.Token())
	}
	if err := c.Extend(ctx, ttl); err != nil {
		t.Fatal(err)
	}
	requests()
	if err := c.Extend(ctx, ttl); err != nil {
		t.Fatal(err)
	}
	if got := requests(); len(got) != 1 {
		t.Errorf("Extend made requests with opcodes %v; want 1", got)
	}
	raw := rawConn(t, srv.Addr())
	if q := children(t, raw, d, "one"); len(q) != 1 {
		t.Errorf("after a failed TryAcquire the queue is %q; want only the holder", q)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	requests()
	b, err := d.Acquire(ctx, req("c"))
	if err != nil {
		t.Fatal(err)
	}
	if got := requests(); len(got) != 1 {
		t.Errorf("uncontended blocking Acquire made requests with opcodes %v; want 1", got)
	}
	if err := b.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestTTLLongerThanSessionRefused(t *testing.T) {
	srv := startZooKeeper(t)
	c := newFence(t, dial(t, srv.Addr(), sessionTimeout))
	_, err := c.TryAcquire(ctxT(t), "k", fence.WithTTL(2*sessionTimeout))
	if !errors.Is(err, fence.ErrInvalidTTL) {
		t.Errorf("TryAcquire with a TTL longer than the session timeout: %v; want ErrInvalidTTL", err)
	}
}

func TestRootAndKeysDoNotNest(t *testing.T) {
	srv := startZooKeeper(t)
	ctx := ctxT(t)
	raw := rawConn(t, srv.Addr())
	d := dial(t, srv.Addr(), sessionTimeout, fencezk.WithRoot("/apps/x/locks/"))
	other := dial(t, srv.Addr(), sessionTimeout, fencezk.WithRoot("/apps/y"))
	a, o := newFence(t, d), newFence(t, other)
	keys := []string{"a", "a/b", ".", "..", "a/..", "/", "%2F"}
	var leases []*fence.Lease
	for _, k := range keys {
		if p := d.KeyPath(k); strings.Count(p, "/") != 4 || strings.HasSuffix(p, "/.") || strings.HasSuffix(p, "/..") {
			t.Errorf("KeyPath(%q) = %q; want one znode name under /apps/x/locks", k, p)
		}
		l, err := a.TryAcquire(ctx, k)
		if err != nil {
			t.Fatalf("TryAcquire(%q): %v", k, err)
		}
		leases = append(leases, l)
		// Another root is another namespace.
		lo, err := o.TryAcquire(ctx, k)
		if err != nil {
			t.Fatalf("TryAcquire(%q) under another root: %v", k, err)
		}
		_ = lo.Release(ctx)
	}
	if ok, _, _ := raw.Exists("/apps/x/locks"); !ok {
		t.Errorf("root /apps/x/locks was not created")
	}
	hs, err := a.List(ctx, "a/")
	if err != nil || len(hs) != 2 || hs[0].Key != "a/.." || hs[1].Key != "a/b" {
		t.Errorf("List(a/) = %+v, %v; want a/.. and a/b", hs, err)
	}
	for _, l := range leases {
		if err := l.Release(ctx); err != nil {
			t.Error(err)
		}
	}
}

// TestDeletedZnodeLosesPromptly deletes the holder's znode: its lease
// context must end through the driver's watch, long before its local
// validity would.
func TestDeletedZnodeLosesPromptly(t *testing.T) {
	srv := startZooKeeper(t)
	ctx := ctxT(t)
	raw := rawConn(t, srv.Addr())
	const long = 20 * time.Second
	d := dial(t, srv.Addr(), long)
	c := newFence(t, d, fence.WithTTL(long), fence.WithoutRenewal())
	l, err := c.TryAcquire(ctx, "del")
	if err != nil {
		t.Fatal(err)
	}
	if err := raw.Delete(d.KeyPath("del")+"/"+children(t, raw, d, "del")[0], -1); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	select {
	case <-l.Done():
		t.Logf("loss noticed %v after the delete", time.Since(deleted))
	case <-time.After(long / 2):
		t.Fatalf("lease still valid %v after its znode was deleted", long/2)
	}
	var lost *fence.LostError
	if !errors.As(l.Err(), &lost) || lost.Reason != fence.LossSession {
		t.Errorf("cause %v; want a *LostError with reason %q", l.Err(), fence.LossSession)
	}
}

// TestConnectionBlipIsNotLoss cuts the holder's connection: the client
// reconnects within the session timeout and keeps its session, its znode
// and its lease.
func TestConnectionBlipIsNotLoss(t *testing.T) {
	srv := startZooKeeper(t)
	ctx := ctxT(t)
	p := newProxy(t, srv.Addr())
	const ttl, session = 4 * time.Second, 5 * time.Second
	d := dial(t, p.Addr(), session)
	c := newFence(t, d, fence.WithTTL(ttl))
	other := newFence(t, dial(t, srv.Addr(), sessionTimeout))
	l, err := c.TryAcquire(ctx, "blip")
	if err != nil {
		t.Fatal(err)
	}
	sid := d.Conn().SessionID()
	for range 3 {
		p.Cut()
		time.Sleep(ttl)
		if err := l.Err(); err != nil {
			t.Fatalf("lease lost after a connection blip: %v", err)
		}
	}
	if got := d.Conn().SessionID(); got != sid {
		t.Errorf("session %x after the blips; want the same session %x", got, sid)
	}
	if _, err := other.TryAcquire(ctx, "blip"); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("TryAcquire by another client after the blips: %v; want ErrHeld", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release after the blips: %v", err)
	}
}

// TestSessionExpiryIsLoss keeps the holder away from the server past its
// session timeout: the holder's lease ends (locally, before the server
// could give the key away), the server expires the session and deletes
// the znode, the claim reports the expiry when the client is back, and
// the next holder gets a greater token.
func TestSessionExpiryIsLoss(t *testing.T) {
	srv := startZooKeeper(t)
	ctx := ctxT(t)
	p := newProxy(t, srv.Addr())
	d := dial(t, p.Addr(), sessionTimeout)
	c := newFence(t, d)
	other := newFence(t, dial(t, srv.Addr(), sessionTimeout))
	l, err := c.TryAcquire(ctx, "expire")
	if err != nil {
		t.Fatal(err)
	}
	// A bare claim on the same session, to see the driver's own report.
	claim, err := d.TryAcquire(ctx, fence.Request{Key: "expire-claim", Owner: "o", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	claimLost := make(chan error, 1)
	claim.(fence.SessionClaim).NotifyLost(func(err error) { claimLost <- err })
	var otherGot atomic.Pointer[fence.Lease]
	otherDone := make(chan error, 1)
	go func() {
		l2, err := other.Acquire(ctx, "expire")
		otherGot.Store(l2)
		otherDone <- err
	}()
	go p.Partition(sessionTimeout + 3*time.Second)
	select {
	case <-l.Done():
	case <-time.After(ttl + 5*time.Second):
		t.Fatalf("holder's lease still valid %v into a partition longer than its session timeout", ttl+5*time.Second)
	}
	select {
	case err := <-otherDone:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
		if l.Err() == nil {
			t.Errorf("the waiter got the key while the old holder's lease was valid")
		}
		if otherGot.Load().Token() <= l.Token() {
			t.Errorf("token %d after %d", otherGot.Load().Token(), l.Token())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("waiter did not get the key after the holder's session expired")
	}
	select {
	case err := <-claimLost:
		if !errors.Is(err, zk.ErrSessionExpired) || !errors.Is(err, fence.ErrNotHeld) {
			t.Errorf("claim lost with %v; want the session's expiry", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the claim did not report its session's expiry after the partition")
	}
	if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
		t.Errorf("Release of the expired lease: %v; want ErrLost", err)
	}
	_ = otherGot.Load().Release(ctx)
	// The driver carries on with a new session.
	l3, err := c.Acquire(ctx, "expire", fence.WithWait(20*time.Second))
	if err != nil {
		t.Fatalf("Acquire on the driver whose session expired: %v", err)
	}
	_ = l3.Release(ctx)
}

// TestServerPausedPastSessionTimeout stops the server (SIGSTOP) for longer
// than the session timeout, then resumes it: the holder's lease ends within
// its TTL, and once the server is back the key goes to a new holder with a
// greater token.
func TestServerPausedPastSessionTimeout(t *testing.T) {
	srv := startZooKeeper(t)
	ctx := ctxT(t)
	c := newFence(t, dial(t, srv.Addr(), sessionTimeout))
	l, err := c.TryAcquire(ctx, "paused")
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	stopped := time.Now()
	select {
	case <-l.Done():
		t.Logf("lease ended %v after the server stopped: %v", time.Since(stopped), l.Err())
	case <-time.After(ttl + 5*time.Second):
		srv.Cont()
		t.Fatalf("lease still valid %v after the server stopped", ttl+5*time.Second)
	}
	time.Sleep(sessionTimeout + time.Second - time.Since(stopped))
	srv.Cont()
	_ = l.Release(ctx) // lost: if its session survived, this frees the key
	other := newFence(t, dial(t, srv.Addr(), sessionTimeout))
	l2, err := other.Acquire(ctx, "paused", fence.WithWait(30*time.Second))
	if err != nil {
		t.Fatalf("Acquire after the server resumed: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after %d", l2.Token(), l.Token())
	}
	_ = l2.Release(ctx)
}

// TestWaiterWithExpiredSessionQueuesAgain: a waiter whose session expires
// while it waits is never granted the key on its lost entry; it queues
// again in the client's new session (the expiry is ErrUnavailable to the
// waiting Acquire), leaves nothing of the old session behind, and gets
// the key when the holder releases it.
func TestWaiterWithExpiredSessionQueuesAgain(t *testing.T) {
	srv := startZooKeeper(t)
	ctx := ctxT(t)
	p := newProxy(t, srv.Addr())
	holder := newFence(t, dial(t, srv.Addr(), sessionTimeout))
	l, err := holder.TryAcquire(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	wd := dial(t, p.Addr(), sessionTimeout)
	waiter := newFence(t, wd)
	type result struct {
		l   *fence.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l2, err := waiter.Acquire(ctx, "w")
		got <- result{l2, err}
	}()
	raw := rawConn(t, srv.Addr())
	d := dial(t, srv.Addr(), sessionTimeout)
	// The waiter's entry: the second one, once it stays (its first try's
	// came and went).
	var first string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		q := children(t, raw, d, "w")
		if len(q) == 2 && q[1] == first {
			break
		}
		if first = ""; len(q) == 2 {
			first = q[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %q; want the holder and the waiter", q)
		}
	}
	oldSession := wd.Conn().SessionID()
	p.Partition(sessionTimeout + 2*time.Second)

	// Queued again: the holder, then a new entry of the new session.
	var q []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		q = children(t, raw, d, "w")
		if len(q) == 2 && q[1] != first {
			break
		}
		select {
		case r := <-got:
			t.Fatalf("waiter whose session expired returned while the key is held: %v, %v; want it to queue again", r.l, r.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue %q %v after the waiter's session expired; want the holder and a new entry", q, 30*time.Second)
		}
	}
	_, st, err := raw.Get(d.KeyPath("w") + "/" + q[1])
	if err != nil {
		t.Fatal(err)
	}
	if st.EphemeralOwner == oldSession || st.EphemeralOwner != wd.Conn().SessionID() {
		t.Errorf("new entry %s owned by session %#x; want the waiter's new session %#x (old %#x)",
			q[1], st.EphemeralOwner, wd.Conn().SessionID(), oldSession)
	}
	select {
	case r := <-got:
		t.Fatalf("waiter whose session expired returned while the key is held: %v, %v; want it to wait on", r.l, r.err)
	default:
	}
	if err := l.Err(); err != nil {
		t.Errorf("holder lost its lease: %v", err)
	}

	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("waiter, after the release: %v", r.err)
		}
		if r.l.Token() <= l.Token() {
			t.Errorf("waiter's token %d after the holder's %d", r.l.Token(), l.Token())
		}
		_ = r.l.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not granted the key within 10s of its release")
	}
	if q := children(t, raw, d, "w"); len(q) != 0 {
		t.Errorf("queue %q after both released; want it empty", q)
	}
}

// TestGrantedSessionTimeout: a server that grants a shorter session than
// asked for makes the driver refuse TTLs longer than the granted one.
func TestGrantedSessionTimeout(t *testing.T) {
	t.Setenv("JAVA_TOOL_OPTIONS", "")
	srv := testserver.ZooKeeper(t, testserver.Args("maxSessionTimeout=4000"))
	c := newFence(t, dial(t, srv.Addr(), 10*time.Second))
	ctx := ctxT(t)
	_, err := c.TryAcquire(ctx, "k", fence.WithTTL(6*time.Second))
	if !errors.Is(err, fence.ErrInvalidTTL) || !strings.Contains(err.Error(), "4s") {
		t.Errorf("TryAcquire with a TTL between the granted (4s) and the asked (10s) session timeout: %v; want ErrInvalidTTL naming 4s", err)
	}
	l, err := c.TryAcquire(ctx, "k", fence.WithTTL(4*time.Second))
	if err != nil {
		t.Fatalf("TryAcquire with a TTL of the granted session timeout: %v", err)
	}
	_ = l.Release(ctx)
}
