package fencezk_test

import (
	"context"
	"io"
	"log"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencezk"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestTokensAcrossElections kills the leader of a ZooKeeper ensemble of 3.
// Zxids jump by 2³² (about 72 minutes of microseconds) at the election
// that follows, and a token epoch with one base would carry that jump
// into every later token, ahead of the clock; deleting the epoch then
// re-seeds it from the clock, below those tokens. With a base per
// election, the first token after the election is near the clock, above
// the last one before; drivers agree on it; a deleted epoch seeds above
// it. An epoch seeded with one base (by an earlier fencezk) keeps it, and
// its lead, rather than going back.
func TestTokensAcrossElections(t *testing.T) {
	ctx := ctxT(t)
	e := testserver.ZooKeeperEnsemble(t, 3)
	addrs := e.Addrs()
	conn, _, err := zk.Connect(addrs, 10*time.Second, zk.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	open := func(root string) *fencezk.Store {
		d, err := fencezk.Dial(addrs, sessionTimeout, fencezk.WithRoot(root))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		return d
	}
	// take acquires and releases key, waiting through the election, and
	// returns the token.
	take := func(c *fence.Client, key string) int64 {
		t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		l, err := c.Acquire(wctx, key)
		if err != nil {
			t.Fatalf("Acquire %q: %v", key, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release %q: %v", key, err)
		}
		return l.Token()
	}
	nowMicro := func() int64 { return time.Now().UnixMicro() }

	// An epoch as an earlier fencezk seeded it: the bare seed, and the
	// mark this one puts on it.
	seed := strconv.FormatInt(nowMicro(), 10)
	for _, p := range []string{"/legacy", "/legacy/%epoch", "/legacy/%epoch/" + seed} {
		data := []byte(nil)
		if strings.HasSuffix(p, "%epoch") {
			data = []byte(seed)
		}
		if _, err := conn.Create(p, data, 0, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatalf("create %s: %v", p, err)
		}
	}

	da := open("/new")
	a := newFence(t, da)
	legacy := newFence(t, open("/legacy"))
	before := take(a, "k")
	legacyBefore := take(legacy, "k")

	leader := e.Leader(ctx)
	if leader == nil {
		t.Fatal("no server of the ensemble says it leads")
	}
	leader.Kill()
	t.Logf("killed the ensemble's leader %s", leader.Addr())
	t.Cleanup(func() { _ = leader.Start() })

	after := take(a, "k")
	if after <= before {
		t.Errorf("token %d after the election, %d before; want it greater", after, before)
	}
	if lead := after - nowMicro(); lead > int64(5*time.Second/time.Microsecond) {
		t.Errorf("token %d after the election is %v ahead of the clock: the election's zxid jump went into it", after, time.Duration(lead)*time.Microsecond)
	}
	if legacyAfter := take(legacy, "k"); legacyAfter-legacyBefore < 1<<31 {
		t.Errorf("epoch with one base: token %d after the election, %d before; want it to keep its one base (a jump of about 2^32)", legacyAfter, legacyBefore)
	}

	// Another driver reads the same base for the election, whoever
	// recorded it.
	b := newFence(t, open("/new"))
	l, err := b.Acquire(ctx, "held")
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	for name, d := range map[string]*fencezk.Store{"another": da, "a new": open("/new")} {
		h, err := d.Inspect(ctx, "held")
		if err != nil || h.Token != l.Token() {
			t.Errorf("%s driver's Inspect = %+v, %v; want token %d", name, h, err, l.Token())
		}
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// A base that is not a number fails loudly.
	mark := childOnly(t, conn, da.EpochPath())
	records, _, err := conn.Children(mark)
	if err != nil || len(records) == 0 {
		t.Fatalf("records of %s: %q, %v; want the election's", mark, records, err)
	}
	rec := mark + "/" + records[0]
	good, _, err := conn.Get(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Set(rec, []byte("x"), -1); err != nil {
		t.Fatal(err)
	}
	if _, err := newFence(t, open("/new")).TryAcquire(ctx, "k"); err == nil || !strings.Contains(err.Error(), "not a number") {
		t.Errorf("TryAcquire with a base of %q: %v; want it refused", "x", err)
	}
	if _, err := conn.Set(rec, good, -1); err != nil {
		t.Fatal(err)
	}

	// A deleted epoch seeds above every token issued before.
	deleteAll(t, conn, da.EpochPath())
	if again := take(a, "k"); again <= after {
		t.Errorf("token %d after the epoch was deleted, %d before; want it greater", again, after)
	}
}

// childOnly returns the path of the one child of path.
func childOnly(t *testing.T, conn *zk.Conn, path string) string {
	t.Helper()
	kids, _, err := conn.Children(path)
	if err != nil || len(kids) != 1 {
		t.Fatalf("children of %s: %q, %v; want one", path, kids, err)
	}
	return path + "/" + kids[0]
}
