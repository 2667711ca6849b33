package fence_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

// TestLockDelayAfterExpiry: a lease that runs out in the store keeps its
// key from everyone for the delay after its expiry, and no longer.
func TestLockDelayAfterExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := fencemem.New()
		holder := fence.New(s, fence.WithTTL(time.Second))
		other := fence.New(s, fence.WithTTL(time.Second))
		start := time.Now()
		l, err := holder.TryAcquire(ctx, "k", fence.WithoutRenewal(), fence.WithLockDelay(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		<-l.Done() // lost locally before the store's expiry, one second after start
		time.Sleep(time.Until(start.Add(6*time.Second - time.Millisecond)))
		_, err = other.TryAcquire(ctx, "k") // no lock-delay of its own
		var held *fence.HeldError
		if !errors.As(err, &held) || held.Holder == nil || held.Holder.Token != l.Token() || held.Holder.ExpiresIn != time.Millisecond {
			t.Fatalf("1ms before the delay ends: %v (%+v); want held by the lost holder for 1ms more", err, held)
		}
		if err := l.Renew(ctx); !errors.Is(err, fence.ErrLost) {
			t.Errorf("the lost holder renewed in its delay: %v", err)
		}
		if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
			t.Errorf("the lost holder's Release: %v; want ErrLost", err)
		}
		if _, err := other.TryAcquire(ctx, "k"); !errors.Is(err, fence.ErrHeld) {
			t.Fatalf("the lost holder's Release lifted the delay: %v", err)
		}
		got, err := other.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if at := time.Since(start); at < 6*time.Second || at > 6*time.Second+5*time.Millisecond {
			t.Errorf("acquired %v after the first grant; want 6s (the TTL, then the delay), give or take the waiter's wake-up", at)
		}
		if got.Token() <= l.Token() {
			t.Errorf("token %d after %d", got.Token(), l.Token())
		}
	})
}

// TestLockDelayFromTheStoresNotice: the delay counts from the moment the
// store ended the lease (here: expired it early), and the holder learns of
// its loss at its next renewal.
func TestLockDelayFromTheStoresNotice(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := fencemem.New()
		c := fence.New(s, fence.WithTTL(30*time.Second))
		l, err := c.TryAcquire(ctx, "k", fence.WithLockDelay(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		expired := time.Now()
		s.Expire("k")
		<-l.Done()
		if lossReason(t, l) != fence.LossRefused {
			t.Errorf("loss %v; want refused renewal", l.Err())
		}
		time.Sleep(time.Until(expired.Add(time.Minute - time.Nanosecond)))
		if _, err := c.TryAcquire(ctx, "k"); !errors.Is(err, fence.ErrHeld) {
			t.Fatalf("1ns before the delay ends: %v; want ErrHeld", err)
		}
		time.Sleep(time.Nanosecond)
		if _, err := c.TryAcquire(ctx, "k"); err != nil {
			t.Fatalf("at the delay's end: %v", err)
		}
	})
}

// TestLockDelayReleaseFreesAtOnce: a released key knows no delay.
func TestLockDelayReleaseFreesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := fencemem.New()
		c := fence.New(s, fence.WithLockDelay(time.Hour))
		l, err := c.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		set, err := c.AcquireAll(ctx, []string{"a", "b"})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := set.Release(ctx); err != nil {
			t.Fatal(err)
		}
		other := fence.New(s)
		if _, err := other.TryAcquire(ctx, "k"); err != nil {
			t.Errorf("released key not free at once: %v", err)
		}
		if _, err := other.TryAcquireAll(ctx, []string{"a", "b"}); err != nil {
			t.Errorf("released set not free at once: %v", err)
		}
		other.Close(ctx)
	})
}

// TestLockDelayOfASet: each lease of an AcquireAll keeps the delay.
func TestLockDelayOfASet(t *testing.T) {
	multiPaths(t, func(t *testing.T, s *fencemem.Store, drv fence.Driver) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			c := fence.New(drv, fence.WithTTL(time.Second))
			set, err := c.AcquireAll(ctx, []string{"a", "b"}, fence.WithLockDelay(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			s.Expire("b")
			<-set.Done()
			time.Sleep(30 * time.Second)
			if _, err := c.TryAcquire(ctx, "b"); !errors.Is(err, fence.ErrHeld) {
				t.Fatalf("b free within its delay: %v", err)
			}
			if err := set.Release(ctx); !errors.Is(err, fence.ErrLost) {
				t.Fatalf("Release: %v; want b's loss", err)
			}
			if _, err := c.TryAcquire(ctx, "a"); err != nil {
				t.Errorf("a, released, not free: %v", err)
			}
		})
	})
}

// noDelay is a driver without LockDelayer.
type noDelay struct{ s *fencemem.Store }

func (n noDelay) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	return n.s.TryAcquire(ctx, req)
}

func TestLockDelayRefusedWhereNotKept(t *testing.T) {
	ctx := context.Background()
	c := fence.New(noDelay{fencemem.New()})
	if _, err := c.TryAcquire(ctx, "k", fence.WithLockDelay(time.Second)); !errors.Is(err, fence.ErrUnsupported) {
		t.Errorf("TryAcquire: %v; want ErrUnsupported", err)
	}
	if _, err := c.AcquireAll(ctx, []string{"a", "b"}, fence.WithLockDelay(time.Second)); !errors.Is(err, fence.ErrUnsupported) {
		t.Errorf("AcquireAll: %v; want ErrUnsupported", err)
	}
	if err := c.Run(ctx, "k", func(context.Context, *fence.Lease) error { return nil }, fence.WithLockDelay(time.Second)); !errors.Is(err, fence.ErrUnsupported) {
		t.Errorf("Run: %v; want ErrUnsupported", err)
	}
	if _, err := c.TryAcquire(ctx, "k", fence.WithLockDelay(0)); err != nil {
		t.Errorf("no delay: %v", err)
	}
	m := fence.New(fencemem.New())
	if _, err := m.Semaphore("s", 2).TryAcquire(ctx, fence.WithLockDelay(time.Second)); !errors.Is(err, fence.ErrUnsupported) {
		t.Errorf("semaphore: %v; want ErrUnsupported", err)
	}
	if _, err := m.TryAcquire(ctx, "k", fence.WithLockDelay(-time.Second)); !errors.Is(err, fence.ErrInvalidOption) {
		t.Errorf("negative delay: %v; want ErrInvalidOption", err)
	}
}
