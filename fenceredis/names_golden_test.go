package fenceredis

import (
	"testing"

	"github.com/fencing/fence/internal/testkit/goldenkeys"
)

// TestNamesGolden pins the Redis keys, channel and SCAN pattern of every
// key of goldenkeys: renaming them would orphan existing locks and reset
// their token counters.
func TestNamesGolden(t *testing.T) {
	goldenkeys.Check(t, "names.golden", func(key string) []string {
		n := lockNames(DefaultPrefix, key)
		return []string{n.lock, n.counter, n.channel, lockPattern(DefaultPrefix, key)}
	})
}
