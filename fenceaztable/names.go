package fenceaztable

import (
	"crypto/sha256"
	"encoding/hex"

	"github.com/fencing/fence/internal/kit/keyenc"
)

// Entity keys. A key's entity has the PartitionKey "k." and the key
// escaped byte by byte (letters, digits, '-' and '_' as they are, every
// other byte as '~' and two upper-case hex digits), so that the name holds
// none of the characters the Table service refuses in a key ('/', '\',
// '#', '?', control characters) nor any an URL could mangle, and distinct
// keys have distinct names. Keys whose escaped form does not fit in 512
// characters (the service allows 1 KiB of UTF-16) map to "h." and the
// hex SHA-256 of the key. Every entity also keeps its key in full in its
// Key property, which Inspect and List read. The RowKey is always
// "lock": one entity per partition, so that keys spread over partitions
// (and over Cosmos DB's physical partitions).
const (
	escapedPrefix = "k."
	hashedPrefix  = "h."
	maxName       = 512
	rowKey        = "lock"
)

var names = keyenc.New('~', keyenc.Alnum("-_"))

// PartitionKey returns the PartitionKey of the entity that holds key's
// lease and token counter in the store's table (its RowKey is "lock").
// Distinct keys have distinct partition keys.
func PartitionKey(key string) string {
	if len(escapedPrefix)+names.EncodedLen(key) <= maxName {
		return escapedPrefix + names.Encode(key)
	}
	sum := sha256.Sum256([]byte(key))
	return hashedPrefix + hex.EncodeToString(sum[:])
}
