package fencetest

import (
	"errors"
	"testing"
	"time"

	"github.com/fencing/fence"
)

// batchExtend checks the driver's ExtendBatch, where it is a
// BatchExtender: one result per claim, in order; a claim whose lease
// another owner took is refused, and only it, the new owner keeping the
// key; the others are extended by at least the TTL asked, from the
// request (rule 3), as their own Extend would.
func (s *suite) batchExtend(t *testing.T) {
	ctx := s.ctx(t)
	a, other := s.client(t), s.client(t)
	be, ok := a.Driver().(fence.BatchExtender)
	if !ok {
		t.Skip("the driver is no BatchExtender")
	}
	drv := a.Driver()
	keys := []string{s.key(t, "a"), s.key(t, "taken"), s.key(t, "c")}
	var claims []fence.Claim
	for _, k := range keys {
		c, err := drv.TryAcquire(ctx, fence.Request{Key: k, Owner: "fencetest-batch-" + randomHex(8), TTL: s.cfg.TTL})
		if err != nil {
			t.Fatalf("driver TryAcquire(%q): %v", k, err)
		}
		claims = append(claims, c)
		if !be.Batchable(c) {
			t.Skipf("the driver does not batch its own lock claims (%T)", c)
		}
	}
	defer func() {
		for _, c := range claims {
			_ = c.Release(ctx)
		}
	}()
	taken := keys[1]
	if err := s.store.Delete(ctx, taken); err != nil {
		t.Fatalf("Store.Delete(%q): %v", taken, err)
	}
	thief := mustAcquire(t, ctx, other, taken)
	defer mustRelease(t, ctx, thief)

	long := 3 * s.cfg.TTL
	sent := time.Now()
	errs := be.ExtendBatch(ctx, claims, []time.Duration{long, long, long})
	if len(errs) != len(claims) {
		t.Fatalf("ExtendBatch of %d claims returned %d results; want one per claim", len(claims), len(errs))
	}
	for i, err := range errs {
		if i == 1 {
			if !errors.Is(err, fence.ErrNotHeld) {
				t.Errorf("ExtendBatch result for %q, taken by another owner: %v; want ErrNotHeld", keys[i], err)
			}
			continue
		}
		if err != nil {
			t.Errorf("ExtendBatch result for %q, held: %v; want nil (a refusal beside it must not fail it)", keys[i], err)
		}
	}
	if thief.Err() != nil || thief.Renew(ctx) != nil {
		t.Errorf("the new owner of %q after the old owner's refused ExtendBatch: %v", taken, thief.Err())
	}
	// The extended leases outlive their first TTL by far: held until the
	// TTL asked, minus the drift margin, after the request.
	wait := time.Until(sent.Add(s.cfg.TTL + s.cfg.TTL/2))
	time.Sleep(wait)
	for _, k := range []string{keys[0], keys[2]} {
		expectHeld(t, ctx, other, k, "ExtendBatch by 3 TTLs, 1.5 TTLs earlier")
	}
}
