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
	seen := map[string]string{}
	for _, k := range keys {
		n := PartitionKey(k)
		if len(n) > maxName {
			t.Errorf("PartitionKey(%.30q) is %d characters; the limit is %d", k, len(n), maxName)
		}
		if !nameShape.MatchString(n) {
			t.Errorf("PartitionKey(%.30q) = %.60q: not plain ASCII of the expected shape", k, n)
		}
		if prev, dup := seen[n]; dup {
			t.Errorf("keys %.30q and %.30q share partition key %.60q", prev, k, n)
		}
		seen[n] = k
	}
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
