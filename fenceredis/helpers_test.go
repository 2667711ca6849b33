package fenceredis

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// Test deployments are named by a connect string, so that fencetest's
// contender processes can reach them: "single:ADDR", "cluster:A,B,C",
// "redlock:A,B,C" or "sentinel:MASTERNAME@S1,S2,S3" (the Sentinels'
// addresses).

func newClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
}

func newClusterClient(addrs []string) *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
}

// newFailoverClient returns a client of the master the Sentinels at addrs
// name, made the way an application would make it: through
// NewUniversalClient, which makes a failover client when MasterName is set.
func newFailoverClient(masterName string, sentinels []string) redis.UniversalClient {
	return redis.NewUniversalClient(&redis.UniversalOptions{
		MasterName:            masterName,
		Addrs:                 sentinels,
		ContextTimeoutEnabled: true,
	})
}

// clients returns one client per server of the deployment (one cluster
// client for a cluster).
func clients(connect string) (kind string, cs []redis.UniversalClient) {
	kind, list, _ := strings.Cut(connect, ":")
	switch kind {
	case "sentinel":
		name, list, _ := strings.Cut(list, "@")
		return kind, []redis.UniversalClient{newFailoverClient(name, strings.Split(list, ","))}
	}
	addrs := strings.Split(list, ",")
	switch kind {
	case "cluster":
		return kind, []redis.UniversalClient{newClusterClient(addrs)}
	default:
		for _, a := range addrs {
			cs = append(cs, newClient(a))
		}
		return kind, cs
	}
}

// open opens a driver for connect, as fencetest's Config.Open.
func open(connect string, opts ...Option) (fence.Driver, func() error, error) {
	kind, cs := clients(connect)
	closeAll := func() error {
		for _, c := range cs {
			c.Close()
		}
		return nil
	}
	if kind == "redlock" {
		r, err := NewRedlock(cs, opts...)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		return r, func() error { r.Close(); return closeAll() }, nil
	}
	s, err := New(cs[0], opts...)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	return s, func() error { s.Close(); return closeAll() }, nil
}

// raw gives tests direct access to every server of a deployment.
type raw struct {
	kind string
	cs   []redis.UniversalClient
}

func newRaw(t testing.TB, connect string) *raw {
	kind, cs := clients(connect)
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return &raw{kind: kind, cs: cs}
}

// deleteLock removes key's lock behind its holder's back on every server,
// keeping the token counters.
func (r *raw) deleteLock(ctx context.Context, key string) error {
	n := lockNames(DefaultPrefix, key)
	for _, c := range r.cs {
		if err := c.Del(ctx, n.lock).Err(); err != nil {
			return err
		}
	}
	return nil
}

// leftovers lists every key under the default prefix whose lock key starts
// with keyPrefix, apart from token counters.
func (r *raw) leftovers(ctx context.Context, keyPrefix string) ([]string, error) {
	pattern := globEscape(DefaultPrefix+"{"+escaped.Encode(keyPrefix)) + "*"
	var (
		mu   sync.Mutex
		left []string
	)
	scan := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			if k := iter.Val(); !strings.HasSuffix(k, ":token") {
				mu.Lock()
				left = append(left, k)
				mu.Unlock()
			}
		}
		return iter.Err()
	}
	for _, c := range r.cs {
		var err error
		if cc, ok := c.(*redis.ClusterClient); ok {
			err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return scan(ctx, n) })
		} else {
			err = scan(ctx, c)
		}
		if err != nil {
			return left, err
		}
	}
	return left, nil
}

func connectSingle(s *testserver.RedisServer) string { return "single:" + s.Addr() }

func connectCluster(c *testserver.RedisClusterServer) string {
	return "cluster:" + strings.Join(c.Addrs(), ",")
}

func connectRedlock(ss []*testserver.RedisServer) string {
	addrs := make([]string, len(ss))
	for i, s := range ss {
		addrs[i] = s.Addr()
	}
	return "redlock:" + strings.Join(addrs, ",")
}

func connectSentinel(s *testserver.RedisSentinelServer) string {
	return "sentinel:" + s.MasterName() + "@" + strings.Join(s.SentinelAddrs(), ",")
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustOpen(t testing.TB, connect string, opts ...Option) fence.Driver {
	t.Helper()
	drv, closeDrv, err := open(connect, opts...)
	if err != nil {
		t.Fatalf("open %s: %v", connect, err)
	}
	t.Cleanup(func() { _ = closeDrv() })
	return drv
}

func mustClient(t testing.TB, drv fence.Driver, opts ...fence.ClientOption) *fence.Client {
	c := fence.New(drv, opts...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

var _ = fmt.Sprint
