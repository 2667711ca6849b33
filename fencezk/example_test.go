package fencezk_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencezk"
)

// A lease on ZooKeeper: the token is the holder znode's czxid, so it grows
// across every acquisition, leader election and restart of the ensemble.
func Example() {
	// Leases may not be longer than the session timeout.
	drv, err := fencezk.Dial([]string{"zk1:2181", "zk2:2181", "zk3:2181"}, 30*time.Second,
		fencezk.WithRoot("/myapp/locks"))
	if err != nil {
		log.Fatal(err)
	}
	defer drv.Close() // ends the session: frees what it still holds

	locks := fence.New(drv, fence.WithTTL(20*time.Second))
	ctx := context.Background()
	// Waiters queue in ZooKeeper and get the key in the order they asked.
	lease, err := locks.Acquire(ctx, "reports/daily", fence.WithWait(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("writing with fencing token", lease.Token())
}
