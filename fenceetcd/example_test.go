package fenceetcd_test

import (
	"context"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceetcd"
)

// A lease on etcd: the token is the holder entry's create revision plus a
// clock-seeded base, so it grows across every acquisition, failover and
// restart of the cluster, and across a cluster that lost its data.
func Example() {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"http://10.0.0.1:2379", "http://10.0.0.2:2379", "http://10.0.0.3:2379"},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	drv := fenceetcd.New(cli, fenceetcd.WithPrefix("myapp/locks"))
	defer drv.Close()

	locks := fence.New(drv, fence.WithTTL(10*time.Second))
	ctx := context.Background()
	// Waiters queue in etcd and get the key in the order they asked.
	lease, err := locks.Acquire(ctx, "reports/daily", fence.WithWait(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	// Do the work under lease.Context(); send the token with every write.
	fmt.Println("writing with fencing token", lease.Token())
}
