package fencezk_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencezk"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestTokensAfterEmptyRestart takes a key on a ZooKeeper that then loses
// its data (killed and started again with the data directory it had
// before anything was written: its zxids start over), and takes the key
// again: the token must still be greater (docs/design.md section 3, rule
// 9), on a new driver and on a driver that was open before. With the
// seeding clock an hour behind, the one assumption docs/zookeeper.md
// states, the same check catches the token going back: the check can
// fail.
func TestTokensAfterEmptyRestart(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sameDriver bool
		behind     time.Duration
	}{
		{"new driver", false, 0},
		{"driver open before", true, 0},
		{"seed clock an hour behind", false, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			s := testserver.ZooKeeper(t)
			if _, err := s.SaveEmpty(); err != nil {
				t.Fatalf("SaveEmpty: %v", err)
			}
			take := func(c *fence.Client, n int) (last int64) {
				t.Helper()
				for range n {
					l, err := c.TryAcquire(ctx, "k")
					if err != nil {
						t.Fatalf("TryAcquire: %v", err)
					}
					last = l.Token()
					if err := l.Release(ctx); err != nil {
						t.Fatalf("Release: %v", err)
					}
				}
				return last
			}
			// a takes the key a few times, b many more: b's last token
			// is above anything a saw.
			a := newFence(t, dial(t, s.Addr(), sessionTimeout))
			take(a, 3)
			before := take(newFence(t, dial(t, s.Addr(), sessionTimeout)), 50)
			if err := s.RestartEmpty(0); err != nil {
				t.Fatalf("RestartEmpty: %v", err)
			}
			if tc.behind > 0 {
				fencezk.SetSeedClock(t, func() time.Time { return time.Now().Add(-tc.behind) })
			}
			c := a
			if tc.sameDriver {
				// ZooKeeper refuses a client that saw a later zxid than
				// its own: write past what a saw, so that a reconnects
				// (to learn that its session is gone).
				conn := rawConn(t, s.Addr())
				for i := range 40 {
					if _, err := conn.Create(fmt.Sprintf("/push%d", i), nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
						t.Fatal(err)
					}
				}
				// Another driver seeds the new epoch first: a's
				// acquisition then finds an epoch, not the one it read.
				take(newFence(t, dial(t, s.Addr(), sessionTimeout)), 1)
			} else {
				c = newFence(t, dial(t, s.Addr(), sessionTimeout))
			}
			l, err := c.TryAcquire(ctx, "k")
			for deadline := time.Now().Add(20 * time.Second); err != nil && time.Now().Before(deadline); {
				time.Sleep(100 * time.Millisecond)
				l, err = c.TryAcquire(ctx, "k")
			}
			if err != nil {
				t.Fatalf("TryAcquire after the empty restart: %v", err)
			}
			defer l.Release(ctx)
			if wentBack := l.Token() <= before; wentBack != (tc.behind > 0) {
				t.Errorf("token %d after the empty restart, %d before it; want it greater unless the seed clock is behind", l.Token(), before)
			}
		})
	}
}

// TestEpochNotATime: an epoch znode that holds no time, or was rewritten
// (both by hand), makes acquisitions fail, naming it, and leaves no child
// behind, rather than issuing tokens from it.
func TestEpochNotATime(t *testing.T) {
	ctx := ctxT(t)
	s := testserver.ZooKeeper(t)
	conn := rawConn(t, s.Addr())
	for _, tc := range []struct {
		name string
		set  func(d *fencezk.Store) error
	}{
		{"not a time", func(d *fencezk.Store) error {
			_, err := conn.Create(d.EpochPath(), []byte("yesterday"), 0, zk.WorldACL(zk.PermAll))
			return err
		}},
		{"rewritten", func(d *fencezk.Store) error {
			if _, err := conn.Create(d.EpochPath(), []byte("1800000000000000"), 0, zk.WorldACL(zk.PermAll)); err != nil {
				return err
			}
			_, err := conn.Set(d.EpochPath(), []byte("1800000000000000"), 0)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := "/" + strings.ReplaceAll(t.Name(), "/", "-")
			d := dial(t, s.Addr(), sessionTimeout, fencezk.WithRoot(root))
			if _, err := conn.Create(root, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
				t.Fatal(err)
			}
			if err := tc.set(d); err != nil {
				t.Fatal(err)
			}
			c := newFence(t, d)
			for _, acquire := range []struct {
				name string
				do   func() (*fence.Lease, error)
			}{
				{"TryAcquire", func() (*fence.Lease, error) { return c.TryAcquire(ctx, "k") }},
				{"Acquire", func() (*fence.Lease, error) { return c.Acquire(ctx, "k", fence.WithWait(time.Second)) }},
			} {
				l, err := acquire.do()
				if err == nil {
					_ = l.Release(ctx)
					t.Errorf("%s: token %d; want an error", acquire.name, l.Token())
					continue
				}
				if !strings.Contains(err.Error(), "token epoch") {
					t.Errorf("%s: %v; want an error naming the token epoch", acquire.name, err)
				}
				if kids, _, err := conn.Children(d.KeyPath("k")); err == nil && len(kids) > 0 {
					t.Errorf("%s left children behind: %v", acquire.name, kids)
				}
			}
		})
	}
}

// TestTokensAfterEpochDeleted: the token epoch deleted under live
// sessions (an operator re-seeding it, or the whole root removed) and
// seeded again by another driver: a driver that read the old epoch must
// not go on issuing tokens from its base, which is below the new one's.
// Fails on a driver that checks only the epoch znode's version, which a
// new epoch has too.
func TestTokensAfterEpochDeleted(t *testing.T) {
	ctx := ctxT(t)
	s := testserver.ZooKeeper(t)
	conn := rawConn(t, s.Addr())
	for _, tc := range []struct {
		name  string
		under func(d *fencezk.Store) string // the znode deleted with all under it
	}{
		{"epoch", func(d *fencezk.Store) string { return d.EpochPath() }},
		{"root", func(d *fencezk.Store) string { return parentPath(d.EpochPath()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := "/" + strings.ReplaceAll(t.Name(), "/", "-")
			da := dial(t, s.Addr(), sessionTimeout, fencezk.WithRoot(root))
			a := newFence(t, da)
			b := newFence(t, dial(t, s.Addr(), sessionTimeout, fencezk.WithRoot(root)))
			take := func(c *fence.Client, key string) int64 {
				t.Helper()
				l, err := c.TryAcquire(ctx, key)
				if err != nil {
					t.Fatalf("TryAcquire: %v", err)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatalf("Release: %v", err)
				}
				return l.Token()
			}
			take(a, "k") // a reads the epoch
			take(b, "k")
			deleteAll(t, conn, tc.under(da))
			time.Sleep(10 * time.Millisecond) // the new seed is later
			// b's session read the old epoch too: it finds its mark
			// gone and seeds the new epoch.
			byB := take(b, "k")
			if byA := take(a, "k"); byA <= byB {
				t.Errorf("a's token %d after the epoch was seeded again, b's %d before it; want a's greater", byA, byB)
			}
			// And a fresh driver agrees.
			if byC := take(newFence(t, dial(t, s.Addr(), sessionTimeout, fencezk.WithRoot(root))), "k"); byC <= byB {
				t.Errorf("a new driver's token %d, b's %d before it; want it greater", byC, byB)
			}
		})
	}
}

func parentPath(p string) string { return p[:strings.LastIndexByte(p, '/')] }

// deleteAll deletes the znode at path and everything under it.
func deleteAll(t *testing.T, conn *zk.Conn, path string) {
	t.Helper()
	kids, _, err := conn.Children(path)
	if err != nil {
		t.Fatalf("children of %s: %v", path, err)
	}
	for _, k := range kids {
		deleteAll(t, conn, path+"/"+k)
	}
	if err := conn.Delete(path, -1); err != nil {
		t.Fatalf("delete %s: %v", path, err)
	}
}

// TestEpochWithoutMark: an epoch seeded by an earlier fencezk, without
// its mark, is marked by the first session that reads it and used as it
// is.
func TestEpochWithoutMark(t *testing.T) {
	ctx := ctxT(t)
	s := testserver.ZooKeeper(t)
	conn := rawConn(t, s.Addr())
	const seed = "1800000000000000"
	root := "/" + t.Name()
	if _, err := conn.Create(root, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	d := dial(t, s.Addr(), sessionTimeout, fencezk.WithRoot(root))
	if _, err := conn.Create(d.EpochPath(), []byte(seed), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	l, err := newFence(t, d).TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	defer l.Release(ctx)
	if l.Token() < 1800000000000000 || l.Token() > 1800000000001000 {
		t.Errorf("token %d; want the unmarked epoch's seed plus a few zxids", l.Token())
	}
	if ok, _, err := conn.Exists(d.EpochPath() + "/" + seed); err != nil || !ok {
		t.Errorf("the epoch's mark: exists %v, %v; want it put", ok, err)
	}
}

// TestEpochSeededAgainBeforeMark: a driver reads an epoch without a mark
// (seeded by an earlier fencezk), and before it marks it the epoch is
// deleted and seeded again. The mark it then puts, named by the old seed,
// lands on the new epoch: the driver must take it back and read the new
// epoch, or the new epoch would carry a second mark that a session of
// the old one checks and finds.
func TestEpochSeededAgainBeforeMark(t *testing.T) {
	ctx := ctxT(t)
	s := testserver.ZooKeeper(t)
	conn := rawConn(t, s.Addr())
	const oldSeed, newSeed = "1800000000000000", "1900000000000000"
	root := "/" + t.Name()
	if _, err := conn.Create(root, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	d := dial(t, s.Addr(), sessionTimeout, fencezk.WithRoot(root))
	epoch := d.EpochPath()
	if _, err := conn.Create(epoch, []byte(oldSeed), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	fencezk.OnEpochRead(t, func() {
		deleteAll(t, conn, epoch)
		if _, err := conn.Multi(
			&zk.CreateRequest{Path: epoch, Data: []byte(newSeed + " elections"), Acl: zk.WorldACL(zk.PermAll)},
			&zk.CreateRequest{Path: epoch + "/" + newSeed, Acl: zk.WorldACL(zk.PermAll)},
		); err != nil {
			t.Errorf("seed the epoch again: %v", err)
		}
	})
	l, err := newFence(t, d).TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire: %v", err)
	}
	defer l.Release(ctx)
	if l.Token() < 1900000000000000 || l.Token() > 1900000000001000 {
		t.Errorf("token %d; want the new epoch's seed plus a few zxids", l.Token())
	}
	if kids, _, err := conn.Children(epoch); err != nil || len(kids) != 1 || kids[0] != newSeed {
		t.Errorf("children of the new epoch: %q, %v; want its own mark %s alone", kids, err, newSeed)
	}
}
