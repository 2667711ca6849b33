package fencefile

import (
	"testing"

	"github.com/fencing/fence/internal/testkit/goldenkeys"
)

// TestFileNameGolden pins the lock file name of every key of goldenkeys:
// renaming a file would lose its lock and reset its token counter.
func TestFileNameGolden(t *testing.T) {
	goldenkeys.Check(t, "names.golden", goldenkeys.One(fileName))
}
