package fencefile_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencefile"
)

func Example() {
	dir, err := os.MkdirTemp("", "fence-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	store, err := fencefile.New(dir)
	if err != nil {
		log.Fatal(err)
	}
	client := fence.New(store)
	ctx := context.Background()

	var last int64
	for range 2 {
		lease, err := client.Acquire(ctx, "reports/daily")
		if err != nil {
			log.Fatal(err)
		}
		// Send lease.Token() with every write to the protected resource.
		// A key's first token is the clock in microseconds; each next one
		// is greater.
		fmt.Println("holding", lease.Key(), "with a greater token:", lease.Token() > last)
		last = lease.Token()
		if err := lease.Release(ctx); err != nil {
			log.Fatal(err)
		}
	}

	// A second store on the same directory (another process, typically)
	// continues the same token sequence.
	again, _ := fencefile.New(dir)
	lease, err := fence.New(again).TryAcquire(ctx, "reports/daily")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("then a greater token:", lease.Token() > last)
	// Output:
	// holding reports/daily with a greater token: true
	// holding reports/daily with a greater token: true
	// then a greater token: true
}
