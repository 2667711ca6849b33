package fenceetcd_test

import (
	"errors"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceetcd"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// WithPrefix: the driver keeps its keys under the prefix; drivers that
// share a prefix share locks, and a driver with another prefix does not
// see them.
func TestWithPrefix(t *testing.T) {
	srv := testserver.Etcd(t)
	ctx := ctxT(t)
	cli := newClient(t, srv.Endpoints())
	app := newFence(t, newDriver(t, srv.Endpoints(), fenceetcd.WithPrefix("app/locks")))
	l, err := app.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cli.Get(ctx, "", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		t.Error("no keys in etcd while a lease is held")
	}
	for _, kv := range resp.Kvs {
		if !strings.HasPrefix(string(kv.Key), "app/locks/") {
			t.Errorf("key %q outside the prefix app/locks/", kv.Key)
		}
	}
	other := newFence(t, newDriver(t, srv.Endpoints()))
	lo, err := other.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("a driver with the default prefix: %v; want its own lock", err)
	}
	_ = lo.Release(ctx)
	same := newFence(t, newDriver(t, srv.Endpoints(), fenceetcd.WithPrefix("app/locks/")))
	if _, err := same.TryAcquire(ctx, "k"); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("a driver with the same prefix (and a trailing slash): %v; want ErrHeld", err)
	}
	_ = l.Release(ctx)
}
