package fencemysql

import (
	"testing"

	"github.com/fencing/fence/internal/testkit/goldenkeys"
)

// TestLockNameGolden pins the GET_LOCK name of every key of goldenkeys:
// renaming it would let a new acquisition ignore an existing holder.
func TestLockNameGolden(t *testing.T) {
	goldenkeys.Check(t, "names.golden", func(key string) []string {
		return []string{LockName("", key)}
	})
}
