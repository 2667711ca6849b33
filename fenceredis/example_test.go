package fenceredis_test

import (
	"context"
	"errors"
	"log"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceredis"
)

// A lease on one Redis, and a write to data in Redis fenced by its token.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()

	store, err := fenceredis.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	c := fence.New(store, fence.WithTTL(30*time.Second))

	lease, err := c.Acquire(ctx, "reports/nightly", fence.WithWait(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.Background())

	guard, err := fenceredis.NewGuard(rdb)
	if err != nil {
		log.Fatal(err)
	}
	// Refused with a *fence.StaleError if a later holder has written.
	err = guard.Set(lease.Context(), "reports:nightly:status", lease.Token(), "done")
	if errors.Is(err, fence.ErrStale) {
		log.Printf("a newer holder took over: %v", err)
	}
}

// A Redis Cluster: the same Store over a cluster client.
func ExampleNew_cluster() {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
		ContextTimeoutEnabled: true,
	})
	defer rdb.Close()
	store, err := fenceredis.New(rdb)
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()
	_ = fence.New(store)
}

// Redlock over three independent servers: a lease needs two of them.
func ExampleNewRedlock() {
	var servers []redis.UniversalClient
	for _, addr := range []string{"redis-a:6379", "redis-b:6379", "redis-c:6379"} {
		rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		defer rdb.Close()
		servers = append(servers, rdb)
	}
	rl, err := fenceredis.NewRedlock(servers)
	if err != nil {
		log.Fatal(err)
	}
	defer rl.Close()

	c := fence.New(rl, fence.WithTTL(10*time.Second))
	err = c.Run(context.Background(), "billing/close-month", func(ctx context.Context, lease *fence.Lease) error {
		// Work under ctx; send lease.Token() with every write.
		return nil
	}, fence.SkipIfHeld())
	if errors.Is(err, fenceredis.ErrNoQuorum) {
		log.Printf("fewer than 2 of 3 servers reachable: %v", err)
	}
}
