package fenceredis

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencetest"
	"github.com/fencing/fence/internal/testkit/testserver"
)

const suiteTTL = 2 * time.Second // generous: renewals must fit under heavy CI load

// Redis leases end with their TTL, bound to no session: no KillSession.
func store(connect func(t *testing.T) string) func(t *testing.T) fencetest.Store {
	return func(t *testing.T) fencetest.Store {
		c := connect(t)
		r := newRaw(t, c)
		return fencetest.Store{Connect: c, Delete: r.deleteLock, Leftovers: r.leftovers, Wipe: r.wipe}
	}
}

// wipe deletes every Redis key of key, counters included, on every server:
// a Redis restarted empty, or a FLUSHALL, as far as key goes. All of a
// key's names, in every kind, start with its lock name.
func (r *raw) wipe(ctx context.Context, key string) error {
	pattern := globEscape(lockNames(DefaultPrefix, key).lock) + "*"
	del := func(ctx context.Context, c redis.Cmdable) error {
		iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			if err := c.Del(ctx, iter.Val()).Err(); err != nil {
				return err
			}
		}
		return iter.Err()
	}
	for _, c := range r.cs {
		var err error
		if cc, ok := c.(*redis.ClusterClient); ok {
			err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return del(ctx, n) })
		} else {
			err = del(ctx, c)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// outage kills srvs, the suite's Store.Outage; restore starts them again
// on their ports, empty, as a Redis without persistence comes back.
func outage(srvs ...*testserver.RedisServer) func(t *testing.T) (restore func()) {
	return func(t *testing.T) func() {
		for _, s := range srvs {
			s.Kill()
		}
		return func() {
			for _, s := range srvs {
				if err := s.Start(); err != nil {
					t.Fatalf("restart redis-server: %v", err)
				}
			}
		}
	}
}

func TestConformanceSingle(t *testing.T) {
	t.Parallel() // each suite on servers of its own
	fencetest.Run(t, fencetest.Config{
		TTL: suiteTTL,
		Setup: func(t *testing.T) fencetest.Store {
			srv := testserver.Redis(t)
			s := store(func(*testing.T) string { return connectSingle(srv) })(t)
			s.Outage = outage(srv)
			return s
		},
		Open: func(c string) (fence.Driver, func() error, error) { return open(c) },
	})
}

// No Outage: killing one master stops only its slots, and the suite's
// keys may hash to another's; a whole cluster killed comes back only once
// its nodes agree again, on no bound the suite can wait for.
func TestConformanceCluster(t *testing.T) {
	t.Parallel() // each suite on servers of its own
	fencetest.Run(t, fencetest.Config{
		TTL:   suiteTTL,
		Setup: store(func(t *testing.T) string { return connectCluster(testserver.RedisCluster(t, 3)) }),
		Open:  func(c string) (fence.Driver, func() error, error) { return open(c) },
	})
}

// A Sentinel-managed master, reached through a failover client. No
// failover happens here; TestSentinelFailover makes one. No Outage
// either: a master killed for longer than down-after-milliseconds is
// failed over, which ends the outage early.
func TestConformanceSentinel(t *testing.T) {
	t.Parallel() // each suite on servers of its own
	fencetest.Run(t, fencetest.Config{
		TTL:   suiteTTL,
		Setup: store(func(t *testing.T) string { return connectSentinel(testserver.RedisSentinel(t, 1, 1)) }),
		Open:  func(c string) (fence.Driver, func() error, error) { return open(c) },
	})
}

// redlockStore is the suite's store over n servers; its Outage kills a
// majority of them, which leaves no quorum.
func redlockStore(n int) func(t *testing.T) fencetest.Store {
	return func(t *testing.T) fencetest.Store {
		srvs := testserver.Redises(t, n)
		s := store(func(*testing.T) string { return connectRedlock(srvs) })(t)
		s.Outage = outage(srvs[:n/2+1]...)
		return s
	}
}

func TestConformanceRedlock3(t *testing.T) {
	t.Parallel() // each suite on servers of its own
	fencetest.Run(t, fencetest.Config{
		TTL:   suiteTTL,
		Setup: redlockStore(3),
		Open:  func(c string) (fence.Driver, func() error, error) { return open(c) },
	})
}

func TestConformanceRedlock5(t *testing.T) {
	t.Parallel() // each suite on servers of its own
	fencetest.Run(t, fencetest.Config{
		TTL:   suiteTTL,
		Setup: redlockStore(5),
		Open:  func(c string) (fence.Driver, func() error, error) { return open(c) },
	})
}
