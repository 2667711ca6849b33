package fencezk

import (
	"testing"

	"github.com/fencing/fence/internal/testkit/goldenkeys"
)

// TestNamesGolden pins the znode of every key of goldenkeys: renaming it
// would let a new acquisition queue apart from existing holders.
func TestNamesGolden(t *testing.T) {
	d := &Store{root: "/fence"}
	goldenkeys.Check(t, "names.golden", goldenkeys.One(d.KeyPath))
}
