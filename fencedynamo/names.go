package fencedynamo

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/fencing/fence/internal/kit/keyenc"
)

// Item keys. A key's item has the partition key (attribute "k") "k." and
// the key escaped byte by byte (printable ASCII but space and '~' as it
// is, every other byte as '~' and two upper-case hex digits), so that the
// name is plain ASCII whatever the key and distinct keys have distinct
// names. Keys whose escaped form does not fit in 2,048 bytes (DynamoDB's
// limit for a partition key) map to "h." and the hex SHA-256 of the key.
// Every item also keeps its key in full in its "key" attribute, which
// Inspect and List read.
const (
	escapedPrefix = "k."
	hashedPrefix  = "h."
	maxName       = 2048
)

var names = keyenc.New('~', keyenc.Printable(""))

// PartitionKey returns the value of the partition key attribute "k" of
// the item that holds key's lease and token counter in the store's table.
// Distinct keys have distinct partition keys.
func PartitionKey(key string) string {
	if len(escapedPrefix)+names.EncodedLen(key) <= maxName {
		return escapedPrefix + names.Encode(key)
	}
	sum := sha256.Sum256([]byte(key))
	return hashedPrefix + hex.EncodeToString(sum[:])
}
