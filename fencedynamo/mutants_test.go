package fencedynamo_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencedynamo"
)

// checkFirstLookWaits: a fresh Store's first look at a key whose holder
// stopped writing a TTL ago finds it held (it trusts no clock but its own).
func checkFirstLookWaits(ctx context.Context, connect string) error {
	a, closeA, _ := open(connect)
	defer closeA()
	b, closeB, _ := open(connect)
	defer closeB()
	c, err := a.TryAcquire(ctx, req("k", "owner-a"))
	if err != nil {
		return err
	}
	time.Sleep(ttl + 200*time.Millisecond)
	got, err := b.TryAcquire(ctx, req("k", "owner-b"))
	if err == nil {
		_ = got.Release(ctx)
		return fmt.Errorf("key taken at the first look, token %d after %d", got.Token(), c.Token())
	}
	if !errors.Is(err, fence.ErrHeld) {
		return err
	}
	return c.Release(ctx)
}

// checkRenewalRestarts: a renewal within a contender's watch restarts it.
func checkRenewalRestarts(ctx context.Context, connect string) error {
	a, closeA, _ := open(connect)
	defer closeA()
	b, closeB, _ := open(connect)
	defer closeB()
	c, err := a.TryAcquire(ctx, req("k2", "owner-a"))
	if err != nil {
		return err
	}
	if _, err := b.TryAcquire(ctx, req("k2", "owner-b")); !errors.Is(err, fence.ErrHeld) {
		return fmt.Errorf("first look: %v; want ErrHeld", err)
	}
	time.Sleep(ttl * 3 / 4)
	if err := c.Extend(ctx, ttl); err != nil {
		return err
	}
	time.Sleep(ttl * 3 / 4)
	got, err := b.TryAcquire(ctx, req("k2", "owner-b"))
	if err == nil {
		_ = got.Release(ctx)
		return fmt.Errorf("key taken though its holder renewed within the contender's watch")
	}
	if !errors.Is(err, fence.ErrHeld) {
		return err
	}
	return c.Release(ctx)
}

// TestWatchMutants shows that the expiry checks can fail: each passes on
// the driver and fails on a driver that judges expiry the broken way.
func TestWatchMutants(t *testing.T) {
	ctx := testCtx(t)
	checks := map[string]func(context.Context, string) error{
		"first look waits": checkFirstLookWaits,
		"renewal restarts": checkRenewalRestarts,
	}
	for name, check := range checks {
		if err := check(ctx, server(t)); err != nil {
			t.Errorf("%s, on the driver: %v", name, err)
		}
	}
	for mutant, name := range map[string]string{
		"expired-at-first-look": "first look waits",
		"version-blind":         "renewal restarts",
	} {
		restore := fencedynamo.SetWatchMutant(mutant)
		err := checks[name](ctx, server(t))
		restore()
		if err == nil {
			t.Errorf("%s passed on the mutant %s; it must catch it", name, mutant)
		} else {
			t.Logf("%s caught the mutant %s: %v", name, mutant, err)
		}
	}
}
