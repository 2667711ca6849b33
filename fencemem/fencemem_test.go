package fencemem_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencing/fence/internal/testkit/leakcheck"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
	"github.com/fencing/fence/fencetest"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// No Store.Wipe: a Store keeps nothing outside its process, and a new one
// starts its tokens at 1 again, as documented (fencemem is for tests of
// user code). No KillSession: its leases are bound to no session.
func TestConformance(t *testing.T) {
	store := fencemem.New()
	fencetest.Run(t, fencetest.Config{
		SingleProcess: true,
		TTL:           300 * time.Millisecond,
		Setup: func(t *testing.T) fencetest.Store {
			return fencetest.Store{
				Delete: func(ctx context.Context, key string) error {
					store.Delete(key)
					return nil
				},
				Leftovers: func(ctx context.Context, prefix string) ([]string, error) {
					hs, err := store.List(ctx, prefix)
					var left []string
					for _, h := range hs {
						left = append(left, h.Key)
					}
					return left, err
				},
			}
		},
		Open: func(string) (fence.Driver, func() error, error) { return store, nil, nil },
	})
}

func TestWaitersCountsWaitingAcquires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := fencemem.New()
		c := fence.New(store)
		l, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		wctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		for range 2 {
			go func() {
				defer func() { done <- struct{}{} }()
				c.Acquire(wctx, "k")
			}()
		}
		waiters := func() int {
			n, err := store.Waiters(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
		synctest.Wait() // both Acquires wait
		if n := waiters(); n != 2 {
			t.Errorf("Waiters = %d with two Acquires waiting; want 2", n)
		}
		stop()
		<-done
		<-done
		synctest.Wait() // the watches' cleanups ran
		if n := waiters(); n != 0 {
			t.Errorf("Waiters = %d after the waits ended; want 0", n)
		}
		l.Release(ctx)
	})
}
