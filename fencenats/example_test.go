package fencenats_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencenats"
)

// A lease on a JetStream KV bucket: the token is the revision of the
// create, which grows across every acquisition of the bucket's keys.
func Example() {
	ctx := context.Background()
	// The bucket is created if missing, with per-key TTLs (nats-server 2.11+).
	drv, err := fencenats.Dial(ctx, "nats://127.0.0.1:4222", "locks")
	if err != nil {
		log.Fatal(err)
	}
	defer drv.Close()

	locks := fence.New(drv, fence.WithTTL(10*time.Second))
	lease, err := locks.Acquire(ctx, "reports/daily", fence.WithWait(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("writing with fencing token", lease.Token())
}
