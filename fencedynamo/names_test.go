package fencedynamo

import (
	"regexp"
	"strings"
	"testing"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/testkit/goldenkeys"
)

var nameShape = regexp.MustCompile(`^(k\.[!-~]+|h\.[0-9a-f]{64})$`)

func TestPartitionKey(t *testing.T) {
	keys := []string{
		"plain", "Plain", "PLAIN", "a/b", "a/b/", "a//b", ".", "..", "../../etc/passwd", "/abs",
		"with space", "~", "~7E", "%41", "A", "q?", "x#y", "back\\slash", "it's", "ключ", "鍵🔒",
		"e\u0301", "\u00e9", "\x01ctl", "\x7f",
		strings.Repeat("L", 2046), strings.Repeat("L", 2047), strings.Repeat("é", 400),
		strings.Repeat("k", fence.MaxKeyLen), strings.Repeat("k", fence.MaxKeyLen-1) + "j",
	}
	goldenkeys.Shape(t, "partition key", PartitionKey, maxName, "bytes", nameShape, keys)
	if PartitionKey(strings.Repeat("L", 2046)) != "k."+strings.Repeat("L", 2046) {
		t.Errorf("a key whose escaped name fits 2048 bytes is hashed")
	}
	if !strings.HasPrefix(PartitionKey(strings.Repeat("L", 2047)), hashedPrefix) {
		t.Errorf("a key whose escaped name exceeds 2048 bytes is not hashed")
	}
}

// TestPartitionKeyGolden pins the partition key of every key of
// goldenkeys: renaming an item would orphan its lease and reset its
// token counter.
func TestPartitionKeyGolden(t *testing.T) {
	goldenkeys.Check(t, "names.golden", goldenkeys.One(PartitionKey))
}
