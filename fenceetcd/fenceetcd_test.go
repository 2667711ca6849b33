package fenceetcd_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testkit/leakcheck"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceetcd"
	"github.com/fencing/fence/fencetest"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m, testserver.IgnoreLeaks())
}

// ttl is the lease TTL of the tests: etcd's smallest lease TTL is a few
// seconds (1.5 election timeouts, 2s by default) and sessions last 1.5 TTL.
const ttl = 2 * time.Second

func newClient(t testing.TB, endpoints []string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatalf("clientv3.New(%v): %v", endpoints, err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// open is fencetest's Open: connect is the endpoints, comma-separated.
func open(connect string) (fence.Driver, func() error, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: strings.Split(connect, ","), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return nil, nil, err
	}
	d := fenceetcd.New(cli)
	return d, func() error { return errorsJoin(d.Close(), cli.Close()) }, nil
}

func errorsJoin(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// conformanceStore is the fencetest.Store over the etcd at endpoints.
func conformanceStore(t *testing.T, endpoints []string) fencetest.Store {
	cli := newClient(t, endpoints)
	d := fenceetcd.New(cli) // for its key layout only
	t.Cleanup(func() { d.Close() })
	return fencetest.Store{
		Connect: strings.Join(endpoints, ","),
		Delete: func(ctx context.Context, key string) error {
			resp, err := cli.Get(ctx, d.Dir(key), clientv3.WithFirstCreate()...)
			if err != nil || len(resp.Kvs) == 0 {
				return err
			}
			_, err = cli.Delete(ctx, string(resp.Kvs[0].Key))
			return err
		},
		// The holder's entry is the first of its kind's queue; its lease
		// is the holder's session.
		KillSession: func(ctx context.Context, key string, kind fence.Kind) error {
			resp, err := cli.Get(ctx, kindDir(d, key, kind), clientv3.WithFirstCreate()...)
			if err != nil {
				return err
			}
			if len(resp.Kvs) == 0 {
				// Keys held on one session end together: the holder's
				// session ended already if its lock-delay runs.
				if kind == fence.KindLock {
					if dr, err := cli.Get(ctx, strings.TrimSuffix(d.Dir(key), "/")+"%lockdelay"); err == nil && len(dr.Kvs) > 0 {
						return nil
					}
				}
				return fmt.Errorf("no entry holds %s %q", kind, key)
			}
			_, err = cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
			return err
		},
		// Every entry of the key in every kind. Tokens are create
		// revisions, which the cluster never issues twice: nothing of a
		// key's own keeps them growing.
		Wipe: func(ctx context.Context, key string) error {
			for _, k := range []fence.Kind{fence.KindLock, fence.KindSemaphore, fence.KindWrite} {
				if _, err := cli.Delete(ctx, kindDir(d, key, k), clientv3.WithPrefix()); err != nil {
					return err
				}
			}
			return nil
		},
		Queue: func(ctx context.Context, key string, kind fence.Kind) (int, error) {
			resp, err := cli.Get(ctx, kindDir(d, key, kind), clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return 0, err
			}
			return int(resp.Count), nil
		},
		Leftovers: func(ctx context.Context, prefix string) ([]string, error) {
			resp, err := cli.Get(ctx, strings.TrimSuffix(d.Dir(prefix), "/"), clientv3.WithPrefix(), clientv3.WithKeysOnly())
			if err != nil {
				return nil, err
			}
			var left []string
			for _, kv := range resp.Kvs {
				left = append(left, string(kv.Key))
			}
			return left, nil
		},
	}
}

// outage is fencetest's Store.Outage that kills members (a single
// server, a whole cluster, or enough members to lose the quorum), keeping
// their data; restore starts them again together (a member answers once
// the cluster has a leader, which needs a quorum of them).
func outage(members ...*testserver.EtcdServer) func(t *testing.T) (restore func()) {
	return func(t *testing.T) func() {
		for _, m := range members {
			m.Kill()
		}
		return func() {
			errs := make([]error, len(members))
			var wg sync.WaitGroup
			for i, m := range members {
				wg.Go(func() { errs[i] = m.Start() })
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatalf("restart etcd: %v", err)
			}
		}
	}
}

// kindDir is the directory of key's queue of kind (see kinds.go).
func kindDir(d *fenceetcd.Store, key string, kind fence.Kind) string {
	switch kind {
	case fence.KindSemaphore:
		return strings.TrimSuffix(d.Dir(key), "/") + "%sem/"
	case fence.KindRead, fence.KindWrite:
		return strings.TrimSuffix(d.Dir(key), "/") + "%rw/"
	}
	return d.Dir(key)
}

func TestConformance(t *testing.T) {
	fencetest.Run(t, fencetest.Config{
		TTL:          ttl,
		SessionBound: true,
		Setup: func(t *testing.T) fencetest.Store {
			srv := testserver.Etcd(t)
			st := conformanceStore(t, srv.Endpoints())
			st.Outage = outage(srv)
			return st
		},
		Open: open,
	})
}

func TestConformanceCluster(t *testing.T) {
	fencetest.Run(t, fencetest.Config{
		TTL:          ttl,
		SessionBound: true,
		Setup: func(t *testing.T) fencetest.Store {
			cluster := testserver.EtcdCluster(t, 3)
			st := conformanceStore(t, cluster.Endpoints())
			st.Outage = outage(cluster.Members...)
			return st
		},
		Open: open,
	})
}
