package fenceazblob

import (
	"testing"

	"github.com/fencing/fence/internal/testkit/goldenkeys"
)

// TestBlobNameGolden pins the blob name of every key of goldenkeys:
// renaming a blob would orphan its lease and reset its token counter.
func TestBlobNameGolden(t *testing.T) {
	goldenkeys.Check(t, "names.golden", goldenkeys.One(BlobName))
}
