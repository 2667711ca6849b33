package fencezk_test

import (
	"slices"
	"testing"

	"github.com/go-zookeeper/zk"

	"github.com/fencing/fence/fencezk"
)

// WithACL: every znode the driver creates (its root and the root's
// ancestors, a key's queue, a holder's entry) carries the ACL it is given.
// (WithRoot is TestRootAndKeysDoNotNest's.)
func TestWithACL(t *testing.T) {
	srv := startZooKeeper(t)
	ctx := ctxT(t)
	raw := rawConn(t, srv.Addr())
	acl := zk.WorldACL(zk.PermRead | zk.PermWrite | zk.PermCreate | zk.PermDelete) // no PermAdmin
	d := dial(t, srv.Addr(), sessionTimeout, fencezk.WithRoot("/acl/locks"), fencezk.WithACL(acl))
	l, err := newFence(t, d).TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	entries, _, err := raw.Children(d.KeyPath("k"))
	if err != nil || len(entries) != 1 {
		t.Fatalf("children of %s: %v, %v; want the holder's entry", d.KeyPath("k"), entries, err)
	}
	for _, p := range []string{"/acl", "/acl/locks", d.KeyPath("k"), d.KeyPath("k") + "/" + entries[0]} {
		got, _, err := raw.GetACL(p)
		if err != nil {
			t.Errorf("GetACL(%s): %v", p, err)
			continue
		}
		if !slices.Equal(got, acl) {
			t.Errorf("%s has ACL %+v; want %+v", p, got, acl)
		}
	}
}
