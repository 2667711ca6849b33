package fence_test

import (
	"context"
	"errors"
	"testing"
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
	ctx := ctxT(t)
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
	ctx := ctxT(t)
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
	if took := time.Since(start); took < 400*time.Millisecond {
		t.Errorf("Run returned after %v; want at least the 400ms hold", took)
	}
	if _, err := store.Inspect(ctx, "job"); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("key still held after the hold: %v", err)
	}
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
