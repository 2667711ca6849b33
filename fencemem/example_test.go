package fencemem_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

// Advance expires leases in the store without sleeping: here a holder that
// stopped renewing loses the key to another instance.
func ExampleStore_Advance() {
	ctx := context.Background()
	store := fencemem.New()
	a, b := fence.New(store), fence.New(store)

	stale, _ := a.TryAcquire(ctx, "job", fence.WithTTL(time.Minute), fence.WithoutRenewal())
	store.Advance(2 * time.Minute)

	fresh, err := b.TryAcquire(ctx, "job")
	fmt.Println(err, fresh.Token() > stale.Token())
	fresh.Release(ctx)
	stale.Release(ctx)
	// Output: <nil> true
}

// In a testing/synctest bubble, the Client's timers run on virtual time
// too: a lease whose renewals are refused is lost without the test waiting
// in real time.
func TestVirtualTimeWithSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := fencemem.New()
		c := fence.New(store, fence.WithTTL(time.Hour))
		l, err := c.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Hour) // virtual: renewals keep the lease
		if l.Err() != nil {
			t.Fatalf("renewed lease lost: %v", l.Err())
		}
		store.Delete("job")
		time.Sleep(time.Hour / 3) // the next renewal is refused
		synctest.Wait()
		if !errors.Is(l.Err(), fence.ErrLost) {
			t.Fatalf("lease after deletion: %v; want ErrLost", l.Err())
		}
	})
}
