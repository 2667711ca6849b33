package fencezk

import (
	"testing"
	"time"
)

// SetSeedClock sets the clock token epochs are seeded from, until the
// test ends.
func SetSeedClock(t testing.TB, now func() time.Time) {
	old := seedClock
	seedClock = now
	t.Cleanup(func() { seedClock = old })
}

// EpochPath is the znode of the token epoch.
func (d *Store) EpochPath() string { return d.epochPath() }
