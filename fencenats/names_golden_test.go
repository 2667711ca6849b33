package fencenats

import (
	"testing"

	"github.com/fencing/fence/internal/testkit/goldenkeys"
)

// TestNamesGolden pins the KV key of every key of goldenkeys: renaming it
// would let a new acquisition ignore an existing holder.
func TestNamesGolden(t *testing.T) {
	goldenkeys.Check(t, "names.golden", goldenkeys.One((*Store)(nil).Name))
}
