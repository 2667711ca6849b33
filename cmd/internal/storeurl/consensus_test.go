package storeurl_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/cmd/internal/storeurl"
	"github.com/fencing/fence/fenceetcd"
	"github.com/fencing/fence/fencenats"
	"github.com/fencing/fence/fencezk"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// useStore opens raw, takes and releases a key through it, and closes it.
func useStore(t *testing.T, raw string, check func(fence.Driver)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	drv, closer, err := storeurl.Open(ctx, raw)
	if err != nil {
		t.Fatalf("Open(%q): %v", raw, err)
	}
	defer func() {
		if err := closer.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	check(drv)
	c := fence.New(drv, fence.WithTTL(5*time.Second))
	l, err := c.TryAcquire(ctx, "storeurl/k")
	if err != nil {
		t.Fatalf("TryAcquire through %q: %v", raw, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
}

func TestOpenEtcd(t *testing.T) {
	cluster := testserver.EtcdCluster(t, 3)
	var hosts []string
	for _, e := range cluster.Endpoints() {
		hosts = append(hosts, strings.TrimPrefix(e, "http://"))
	}
	useStore(t, "etcd://"+strings.Join(hosts, ",")+"/apps/locks", func(d fence.Driver) {
		if e, ok := d.(*fenceetcd.Store); !ok || e.Prefix() != "apps/locks/" {
			t.Errorf("opened %T with prefix %q; want a *fenceetcd.Store with prefix apps/locks/", d, e.Prefix())
		}
	})
	useStore(t, "etcd://"+hosts[0], func(d fence.Driver) {
		if e := d.(*fenceetcd.Store); e.Prefix() != fenceetcd.DefaultPrefix+"/" {
			t.Errorf("default prefix %q", e.Prefix())
		}
	})
}

func TestOpenZK(t *testing.T) {
	srv := testserver.ZooKeeper(t)
	useStore(t, "zk://"+srv.Addr()+"/apps/locks?session_timeout=10s", func(d fence.Driver) {
		if z, ok := d.(*fencezk.Store); !ok || z.KeyPath("k") != "/apps/locks/k" {
			t.Errorf("opened %T; want a *fencezk.Store rooted at /apps/locks", d)
		}
	})
}

func TestOpenNATS(t *testing.T) {
	srv := testserver.NATS(t)
	useStore(t, srv.URL()+"/locks", func(d fence.Driver) {
		if n, ok := d.(*fencenats.Store); !ok || n.KeyValue().Bucket() != "locks" {
			t.Errorf("opened %T; want a *fencenats.Store on bucket locks", d)
		}
	})
}

func TestConsensusURLErrors(t *testing.T) {
	ctx := context.Background()
	for _, raw := range []string{
		"etcd:///prefix",
		"etcd://h1,,h2/p",
		"etcd://h1/p?tls=1",
		"zk:///p",
		"zk://u:hunter2@h1/p",
		"zk://h1/p?session_timeout=-1s",
		"zk://h1/p?chroot=x",
		"nats:///bucket",
		"nats://h1/bucket?x=1",
		"nats://h1/a/b",
	} {
		_, _, err := storeurl.Open(ctx, raw)
		if !errors.Is(err, storeurl.ErrBadURL) {
			t.Errorf("Open(%q): %v; want ErrBadURL", raw, err)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q): the error shows the password: %v", raw, err)
		}
	}
}
