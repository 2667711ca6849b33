package fence_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

func TestRunHoldsDuringFunctionAndReleases(t *testing.T) {
	ctx := ctxT(t)
	store := fencemem.New()
	c := fence.New(store)
	var token int64
	err := c.Run(ctx, "job", func(ctx context.Context, l *fence.Lease) error {
		token = l.Token()
		if _, err := c.TryAcquire(ctx, "job"); !errors.Is(err, fence.ErrHeld) {
			t.Errorf("key not held during fn: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if token != 1 {
		t.Errorf("fn saw token %d; want 1", token)
	}
	if _, err := store.Inspect(ctx, "job"); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("key still held after Run: %v", err)
	}
}

func TestRunReturnsFunctionError(t *testing.T) {
	ctx := ctxT(t)
	c := fence.New(fencemem.New())
	boom := errors.New("boom")
	if err := c.Run(ctx, "job", func(context.Context, *fence.Lease) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Run: %v; want fn's error", err)
	}
}

func TestRunSkipIfHeld(t *testing.T) {
	ctx := ctxT(t)
	c := fence.New(fencemem.New())
	l, err := c.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	called := false
	err = c.Run(ctx, "job", func(context.Context, *fence.Lease) error { called = true; return nil }, fence.SkipIfHeld())
	if !errors.Is(err, fence.ErrSkipped) || !errors.Is(err, fence.ErrHeld) {
		t.Errorf("Run on a held key with SkipIfHeld: %v; want ErrSkipped and ErrHeld", err)
	}
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Token != l.Token() {
		t.Errorf("skipped Run does not say who holds the key: %v", err)
	}
	if called {
		t.Errorf("fn ran although the key was held")
	}
}

func TestRunCancelsFunctionOnLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := fencemem.New()
		c := fence.New(store, fence.WithTTL(300*time.Millisecond))
		err := c.Run(ctx, "job", func(ctx context.Context, l *fence.Lease) error {
			store.Delete("job")
			select {
			case <-ctx.Done():
				return context.Cause(ctx)
			case <-time.After(5 * time.Second):
				t.Error("fn's context not cancelled after the lease was taken away")
				return nil
			}
		})
		var lost *fence.LostError
		if !errors.As(err, &lost) || lost.Reason != fence.LossRefused {
			t.Errorf("Run whose lease was lost: %v; want a *LostError (refused)", err)
		}
		if n := strings.Count(err.Error(), "lost"); n != 1 {
			t.Errorf("Run: %q names the loss %d times; want once", err, n)
		}
	})
}

// A loss that only the release finds (the store no longer holds the
// lease, and no renewal ran to notice it before) is a loss all the same:
// Run must not report success.
func TestRunReportsLossFoundAtRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := fencemem.New()
		var logs syncBuffer
		// An hour's TTL: no renewal runs while fn does (virtual time does
		// not pass), so only the release can find the loss.
		c := fence.New(store, fence.WithTTL(time.Hour), fence.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		err := c.Run(ctx, "job", func(ctx context.Context, l *fence.Lease) error {
			store.Delete("job")
			return nil
		})
		var lost *fence.LostError
		if !errors.As(err, &lost) || lost.Reason != fence.LossRefused || lost.Key != "job" {
			t.Errorf("Run whose lease the store dropped before the release: %v; want a *LostError (refused)", err)
		}
		if !strings.Contains(logs.String(), "lease lost") || !strings.Contains(logs.String(), "found_by=release") {
			t.Errorf("no log line for the loss found at release; logs:\n%s", logs.String())
		}

		// fn's own error is kept, joined with the loss.
		boom := errors.New("boom")
		err = c.Run(ctx, "job", func(ctx context.Context, l *fence.Lease) error {
			store.Delete("job")
			return boom
		})
		if !errors.Is(err, boom) || !errors.Is(err, fence.ErrLost) {
			t.Errorf("Run: %v; want fn's error joined with ErrLost", err)
		}

		// fn releases the lease itself and ignores what its release found.
		err = c.Run(ctx, "job", func(ctx context.Context, l *fence.Lease) error {
			store.Delete("job")
			_ = l.Release(ctx)
			return nil
		})
		if !errors.Is(err, fence.ErrLost) {
			t.Errorf("Run whose fn released a lease the store had dropped: %v; want ErrLost", err)
		}
		// A release by fn that found the lease held is no error.
		err = c.Run(ctx, "job", func(ctx context.Context, l *fence.Lease) error {
			return l.Release(ctx)
		})
		if err != nil {
			t.Errorf("Run whose fn released its lease: %v; want nil", err)
		}
	})
}

// A lease lost while Run keeps it after fn (HoldAtLeast) is reported.
func TestRunReportsLossDuringHoldAtLeast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := fencemem.New()
		c := fence.New(store, fence.WithTTL(time.Minute))
		done := make(chan error, 1)
		go func() {
			done <- c.Run(ctx, "job", func(context.Context, *fence.Lease) error { return nil }, fence.HoldAtLeast(time.Hour))
		}()
		synctest.Wait() // fn returned; Run holds the key
		store.Delete("job")
		time.Sleep(time.Minute / 3) // the next renewal is refused
		var lost *fence.LostError
		if err := <-done; !errors.As(err, &lost) || lost.Reason != fence.LossRefused {
			t.Errorf("Run whose lease was lost during HoldAtLeast: %v; want a *LostError (refused)", err)
		}
	})
}

func TestRunCancelsFunctionWithCallerContext(t *testing.T) {
	store := fencemem.New()
	c := fence.New(store)
	ctx, cancel := context.WithCancel(ctxT(t))
	err := c.Run(ctx, "job", func(fctx context.Context, l *fence.Lease) error {
		cancel()
		<-fctx.Done()
		return fctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run: %v; want context.Canceled", err)
	}
	if _, err := store.Inspect(context.Background(), "job"); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("key still held after a cancelled Run: %v", err)
	}
}

func TestRunHoldAtLeast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := fencemem.New()
		c := fence.New(store)
		other := fence.New(store)
		done := make(chan error, 1)
		start := time.Now()
		go func() {
			done <- c.Run(ctx, "job", func(context.Context, *fence.Lease) error { return nil }, fence.HoldAtLeast(400*time.Millisecond))
		}()
		time.Sleep(150 * time.Millisecond)
		if err := other.Run(ctx, "job", func(context.Context, *fence.Lease) error {
			t.Error("second instance ran within the first one's minimum hold")
			return nil
		}, fence.SkipIfHeld()); !errors.Is(err, fence.ErrSkipped) {
			t.Errorf("second Run within the hold: %v; want ErrSkipped", err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took != 400*time.Millisecond {
			t.Errorf("Run returned after %v; want after the 400ms hold", took)
		}
		if _, err := store.Inspect(ctx, "job"); !errors.Is(err, fence.ErrNotHeld) {
			t.Errorf("key still held after the hold: %v", err)
		}
	})
}

func TestSemaphoreAndRWMutexInput(t *testing.T) {
	ctx := ctxT(t)
	c := fence.New(fencemem.New())
	if _, err := c.Semaphore("s", 0).TryAcquire(ctx); !errors.Is(err, fence.ErrInvalidOption) {
		t.Errorf("semaphore with limit 0: %v; want ErrInvalidOption", err)
	}
	plain := fence.New(struct{ fence.Driver }{fencemem.New()}) // hides KindSupporter
	if _, err := plain.Semaphore("s", 2).TryAcquire(ctx); !errors.Is(err, fence.ErrUnsupported) {
		t.Errorf("semaphore on a lock-only driver: %v; want ErrUnsupported", err)
	}
	if _, err := plain.RWMutex("s").AcquireWrite(ctx); !errors.Is(err, fence.ErrUnsupported) {
		t.Errorf("rw lock on a lock-only driver: %v; want ErrUnsupported", err)
	}
	l, err := c.Semaphore("s", 2).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Semaphore("s", 2).Run(ctx, func(ctx context.Context, l2 *fence.Lease) error {
		if l2.Token() <= l.Token() {
			t.Errorf("second slot's token %d not above %d", l2.Token(), l.Token())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
}
