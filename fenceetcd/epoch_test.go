package fenceetcd_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceetcd"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestTokensAfterEmptyRestart takes a key on an etcd that then loses its
// data (killed and started again with the data directory it had before
// anything was written: its revisions start over), and takes the key
// again on a new driver: the token must still be greater (docs/design.md
// section 3, rule 9). With the seeding clock an hour behind, the one
// assumption docs/etcd.md states, the same check catches the token going
// back: the check can fail.
func TestTokensAfterEmptyRestart(t *testing.T) {
	for _, tc := range []struct {
		name   string
		behind time.Duration
	}{{"seeded by the clock", 0}, {"seed clock an hour behind", time.Hour}} {
		t.Run(tc.name, func(t *testing.T) {
			before, after := emptyRestartTokens(t, tc.behind)
			if wentBack := after <= before; wentBack != (tc.behind > 0) {
				t.Errorf("token %d after the empty restart, %d before it; want it greater unless the seed clock is behind", after, before)
			}
		})
	}
}

// emptyRestartTokens returns the last token of a key before an empty
// restart of its etcd and the first after it, the new epoch seeded by a
// clock behind by behind.
func emptyRestartTokens(t *testing.T, behind time.Duration) (before, after int64) {
	ctx := ctxT(t)
	s := testserver.Etcd(t)
	if _, err := s.SaveEmpty(); err != nil {
		t.Fatalf("SaveEmpty: %v", err)
	}
	d := newDriver(t, s.Endpoints())
	c := newFence(t, d)
	cli := newClient(t, s.Endpoints())
	// Revisions well past what the new cluster will reach.
	for i := range 300 {
		if _, err := cli.Put(ctx, "other", strconv.Itoa(i)); err != nil {
			t.Fatalf("Put: %v", err)
		}
	}
	for range 3 {
		l, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatalf("TryAcquire before the restart: %v", err)
		}
		before = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}
	if err := s.RestartEmpty(0); err != nil {
		t.Fatalf("RestartEmpty: %v", err)
	}
	if behind > 0 {
		fenceetcd.SetSeedClock(t, func() time.Time { return time.Now().Add(-behind) })
	}
	l, err := newFence(t, newDriver(t, s.Endpoints())).TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire after the empty restart: %v", err)
	}
	defer l.Release(ctx)
	return before, l.Token()
}

// TestEpochNotATime: an epoch entry that holds no time (written by hand)
// makes acquisitions fail, naming it, and leaves no entry behind, rather
// than issuing tokens from garbage.
func TestEpochNotATime(t *testing.T) {
	ctx := ctxT(t)
	s := testserver.Etcd(t)
	d := newDriver(t, s.Endpoints())
	cli := newClient(t, s.Endpoints())
	if _, err := cli.Put(ctx, d.EpochName(), "yesterday"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	c := newFence(t, d)
	for _, acquire := range []struct {
		name string
		do   func() (*fence.Lease, error)
	}{
		{"TryAcquire", func() (*fence.Lease, error) { return c.TryAcquire(ctx, "k") }},
		{"Acquire", func() (*fence.Lease, error) { return c.Acquire(ctx, "k", fence.WithWait(time.Second)) }},
	} {
		l, err := acquire.do()
		if err == nil {
			_ = l.Release(ctx)
			t.Errorf("%s with an epoch that is not a time: token %d; want an error", acquire.name, l.Token())
			continue
		}
		if !strings.Contains(err.Error(), "token epoch") {
			t.Errorf("%s: %v; want an error naming the token epoch", acquire.name, err)
		}
		if left := entries(t, ctx, cli, d, "k"); len(left) > 0 {
			t.Errorf("%s left entries behind: %v", acquire.name, left)
		}
	}
}
