package fence_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

func ExampleClient_Acquire() {
	ctx := context.Background()
	c := fence.New(fencemem.New(), fence.WithTTL(30*time.Second))

	lease, err := c.Acquire(ctx, "invoice-job", fence.WithWait(10*time.Second))
	if err != nil {
		fmt.Println("not acquired:", err)
		return
	}
	defer lease.Release(ctx)

	// Do the work under lease.Context(), which ends the moment the lease is
	// lost, and send the token with every write to the protected resource.
	fmt.Println("holding", lease.Key(), "with token", lease.Token())
	// Output: holding invoice-job with token 1
}

func ExampleClient_TryAcquire() {
	ctx := context.Background()
	store := fencemem.New()
	a, b := fence.New(store), fence.New(store)

	held, _ := a.TryAcquire(ctx, "report")
	defer held.Release(ctx)

	_, err := b.TryAcquire(ctx, "report")
	var he *fence.HeldError
	if errors.As(err, &he) {
		fmt.Println("held, token", he.Holder.Token)
	}
	// Output: held, token 1
}

func ExampleClient_Run() {
	ctx := context.Background()
	store := fencemem.New()
	instanceA, instanceB := fence.New(store), fence.New(store)

	nightly := func(ctx context.Context, l *fence.Lease) error {
		// Instance B's run starts while A's is in progress: it skips.
		err := instanceB.Run(ctx, "nightly-invoices", func(context.Context, *fence.Lease) error {
			return nil
		}, fence.SkipIfHeld())
		if errors.Is(err, fence.ErrSkipped) {
			fmt.Println("instance B: skipped, another instance is running it")
		}
		fmt.Println("instance A: writing invoices with token", l.Token())
		return nil
	}
	if err := instanceA.Run(ctx, "nightly-invoices", nightly, fence.SkipIfHeld()); err != nil {
		fmt.Println(err)
	}
	// Output:
	// instance B: skipped, another instance is running it
	// instance A: writing invoices with token 1
}

func ExampleElection_Lead() {
	ctx := context.Background()
	c := fence.New(fencemem.New())
	e := c.Election("orders-writer")

	err := e.Lead(ctx, func(ctx context.Context, l *fence.Lease) error {
		// Leader-only work goes here; ctx ends if leadership is lost, and
		// writes carry l.Token() so a deposed leader's are refused.
		leader, _ := e.Leader(ctx)
		fmt.Println("leading with token", l.Token(), "- observed leader matches:", leader.Owner == l.Owner())
		return nil // done: resign
	})
	fmt.Println("resigned:", err == nil)
	// Output:
	// leading with token 1 - observed leader matches: true
	// resigned: true
}

func ExampleLease_Context() {
	ctx := context.Background()
	store := fencemem.New()
	c := fence.New(store, fence.WithTTL(2*time.Second))
	lease, _ := c.Acquire(ctx, "k")

	store.Delete("k") // the store loses the lease behind the holder's back

	<-lease.Context().Done() // noticed at the next renewal, within TTL/3
	var lost *fence.LostError
	if errors.As(context.Cause(lease.Context()), &lost) {
		fmt.Println("lost:", lost.Reason)
	}
	fmt.Println(lease.Release(ctx) != nil)
	// Output:
	// lost: refused
	// true
}

func ExampleClient_Partitions() {
	ctx, cancel := context.WithCancel(context.Background())
	c := fence.New(fencemem.New(), fence.WithTTL(10*time.Second))
	parts := c.Partitions("orders", []string{"eu", "us", "apac"}, fence.WithOwner("worker-1"))

	started := make(chan string, 3)
	done := make(chan error)
	go func() {
		done <- parts.Run(ctx, func(ctx context.Context, partition string, l *fence.Lease) error {
			started <- partition // this worker owns the partition: work it, with l.Token()
			<-ctx.Done()         // until it must stop
			return nil
		})
	}()
	for range 3 {
		<-started // alone in the group, this worker gets all three
	}
	fmt.Println(parts.Owned())
	cancel()
	fmt.Println(<-done, parts.Owned())
	// Output:
	// [apac eu us]
	// <nil> []
}

func ExampleSemaphore() {
	ctx := context.Background()
	c := fence.New(fencemem.New())
	gpus := c.Semaphore("gpus", 2)

	a, _ := gpus.TryAcquire(ctx)
	b, _ := gpus.TryAcquire(ctx)
	_, err := gpus.TryAcquire(ctx)
	fmt.Println(a.Token(), b.Token(), errors.Is(err, fence.ErrHeld))
	a.Release(ctx)
	b.Release(ctx)
	// Output: 1 2 true
}

func ExampleRWMutex() {
	ctx := context.Background()
	c := fence.New(fencemem.New())
	config := c.RWMutex("config")

	r, _ := config.TryAcquireRead(ctx)
	_, err := config.TryAcquireWrite(ctx)
	fmt.Println("writer while a reader holds:", errors.Is(err, fence.ErrHeld))
	r.Release(ctx)

	w, _ := config.AcquireWrite(ctx)
	fmt.Println("writer's token above the reader's:", w.Token() > r.Token())
	w.Release(ctx)
	// Output:
	// writer while a reader holds: true
	// writer's token above the reader's: true
}
