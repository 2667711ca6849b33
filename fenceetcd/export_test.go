package fenceetcd

import (
	"context"
	"testing"
	"time"
)

// SetAfterResumeRead sets the hook that runs between Resume's read of the
// holder entry and its transaction; nil removes it.
func SetAfterResumeRead(f func(name string)) { afterResumeRead = f }

// TokenOf is the token of an entry created at revision rev: rev plus the
// base of the token epoch, which it seeds if absent.
func (d *Store) TokenOf(ctx context.Context, rev int64) (int64, error) {
	base, err := d.seed(ctx)
	return base + rev, err
}

// SetSeedClock sets the clock token epochs are seeded from, until the
// test ends.
func SetSeedClock(t testing.TB, now func() time.Time) {
	old := seedClock
	seedClock = now
	t.Cleanup(func() { seedClock = old })
}

// EpochName is the etcd key of the token epoch.
func (d *Store) EpochName() string { return d.epochName() }
