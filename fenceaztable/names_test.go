package fenceaztable

import (
	"regexp"
	"strings"
	"testing"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/testkit/goldenkeys"
)

var nameShape = regexp.MustCompile(`^(k\.[A-Za-z0-9_~-]+|h\.[0-9a-f]{64})$`)

func TestPartitionKey(t *testing.T) {
	keys := []string{
		"plain", "Plain", "PLAIN", "a/b", "a/b/", "a//b", ".", "..", "../../etc/passwd", "/abs",
		"with space", "~", "~7E", "%41", "A", "q?", "x#y", "back\\slash", "it's", "ключ", "鍵🔒",
		"e\u0301", "\u00e9", "\x01ctl", "\x7f",
		strings.Repeat("L", 510), strings.Repeat("L", 511), strings.Repeat("/", 170),
		strings.Repeat("k", fence.MaxKeyLen), strings.Repeat("k", fence.MaxKeyLen-1) + "j",
	}
	goldenkeys.Shape(t, "partition key", PartitionKey, maxName, "characters", nameShape, keys)
	if PartitionKey(strings.Repeat("L", 510)) != "k."+strings.Repeat("L", 510) {
		t.Errorf("a key whose escaped name fits 512 characters is hashed")
	}
}

// TestPartitionKeyGolden pins the partition key of every key of
// goldenkeys: renaming an entity would orphan its lease and reset its
// token counter.
func TestPartitionKeyGolden(t *testing.T) {
	goldenkeys.Check(t, "names.golden", goldenkeys.One(PartitionKey))
}
