package fencetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing/fence"
)

// outage checks availability through a store outage (Store.Outage): a
// waiting Acquire started while the store cannot answer goes on waiting,
// within its wait, and gets the key once the store is back, instead of
// failing at once; a try during the outage fails, and never as held.
func (s *suite) outage(t *testing.T) {
	if s.store.Outage == nil {
		t.Skip("Store.Outage not given")
	}
	ctx := s.ctx(t)
	c := s.client(t)
	key := s.key(t, "k")
	// Connected before the outage, as a running service is.
	if err := mustAcquire(t, ctx, c, key).Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}

	restore := s.store.Outage(t)
	down := time.Now()
	restored := false
	defer func() {
		if !restored {
			restore()
		}
	}()
	tctx, cancel := context.WithTimeout(ctx, s.slack())
	_, err := c.TryAcquire(tctx, key)
	timedOut := tctx.Err() != nil
	cancel()
	switch {
	case err == nil:
		t.Fatal("TryAcquire during the outage succeeded")
	case errors.Is(err, fence.ErrHeld):
		t.Errorf("TryAcquire during the outage: %v; the key is free, the store could not answer: not ErrHeld", err)
	case errors.Is(err, fence.ErrUnavailable):
		t.Logf("TryAcquire during the outage: %v", err)
	case timedOut:
		t.Logf("TryAcquire during the outage waited until its context ended: %v", err)
	default:
		t.Errorf("TryAcquire during the outage: %v; want an error matching fence.ErrUnavailable", err)
	}

	// The outage lasts a few TTLs, the wait well beyond it.
	outage := max(2*time.Second, 3*s.cfg.TTL)
	type result struct {
		l   *fence.Lease
		err error
	}
	got := make(chan result, 1)
	go func() {
		l, err := c.Acquire(ctx, key, fence.WithWait(time.Until(down.Add(outage))+3*s.slack()))
		got <- result{l, err}
	}()
	select {
	case r := <-got:
		if r.l != nil {
			r.l.Release(ctx)
		}
		t.Fatalf("Acquire with a wait longer than the outage returned during the outage, after %v: %v; want it to wait until the store answers",
			time.Since(down).Round(time.Millisecond), r.err)
	case <-time.After(time.Until(down.Add(outage))):
	}
	restore()
	restored = true
	back := time.Now()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("Acquire, waiting through the outage: %v; want the key once the store answers again", r.err)
		}
		t.Logf("the waiting Acquire got the key %v after the store came back (down %v)",
			time.Since(back).Round(time.Millisecond), back.Sub(down).Round(time.Millisecond))
		if err := r.l.Err(); err != nil {
			t.Errorf("lease from the waiting Acquire: %v", err)
		}
		if err := r.l.Release(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
	case <-time.After(2 * s.slack()):
		t.Fatalf("the waiting Acquire did not get the key within %v of the store's return", 2*s.slack())
	}
}
