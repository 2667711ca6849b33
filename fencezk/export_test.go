package fencezk

import (
	"sync"
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

// OnEpochRead runs f once, the next time a driver has read the token
// epoch and is about to mark it, until the test ends.
func OnEpochRead(t testing.TB, f func()) {
	var once sync.Once
	epochRead = func() { once.Do(f) }
	t.Cleanup(func() { epochRead = nil })
}
