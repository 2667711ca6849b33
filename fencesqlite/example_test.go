package fencesqlite_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencesqlite"
)

func Example() {
	dir, err := os.MkdirTemp("", "fence-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	// Every process of the host that opens this file shares its locks.
	store, err := fencesqlite.Open(filepath.Join(dir, "fence.db"))
	if err != nil {
		log.Fatal(err) // errors.Is(err, fencesqlite.ErrNetworkFS) on NFS and the like
	}
	defer store.Close()
	client := fence.New(store)
	ctx := context.Background()

	lease, err := client.Acquire(ctx, "reports/daily")
	if err != nil {
		log.Fatal(err)
	}
	// Send lease.Token() with every write to the protected resource.
	fmt.Println("holding", lease.Key())

	// Another store on the file, as another process would open it, finds
	// the key held.
	other, err := fencesqlite.Open(filepath.Join(dir, "fence.db"))
	if err != nil {
		log.Fatal(err)
	}
	defer other.Close()
	_, err = fence.New(other).TryAcquire(ctx, "reports/daily")
	fmt.Println("held elsewhere:", errors.Is(err, fence.ErrHeld))

	next := lease.Token()
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}
	lease, err = fence.New(other).TryAcquire(ctx, "reports/daily")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(ctx)
	fmt.Println("after release, a greater token:", lease.Token() > next)
	// Output:
	// holding reports/daily
	// held elsewhere: true
	// after release, a greater token: true
}
