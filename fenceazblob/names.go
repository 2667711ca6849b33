package fenceazblob

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/fencing/fence/internal/kit/keyenc"
)

// Blob names. A key maps to "key/" and the key escaped byte by byte
// (letters, digits, '-' and '_' as they are, every other byte as '~' and
// two upper-case hex digits), so names are plain ASCII, never end in '.'
// or '/', hold no path segments Azure or an HTTP stack could normalize
// ("..", "//"), and keep the key's order and prefixes (List lists by
// prefix). Keys whose escaped form does not fit Azure's 1,024-character
// limit map to "hash/" and the hex SHA-256 of the key; the key itself is
// the blob's content.
const (
	escapedPrefix = "key/"
	hashedPrefix  = "hash/"
	maxBlobName   = 1024
)

// names keeps letters, digits, '-' and '_'.
var names = keyenc.New('~', keyenc.Alnum("-_"))

// BlobName returns the name of the blob that holds key's lease and token
// counter in the store's container. Distinct keys have distinct names.
func BlobName(key string) string {
	if len(escapedPrefix)+names.EncodedLen(key) <= maxBlobName {
		return escapedPrefix + names.Encode(key)
	}
	sum := sha256.Sum256([]byte(key))
	return hashedPrefix + hex.EncodeToString(sum[:])
}

// keyFromName returns the key of a blob named by BlobName, for names of
// the escaped form; false for hashed names and names fence did not make.
func keyFromName(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, escapedPrefix)
	if !ok || rest == "" {
		return "", false
	}
	key, err := names.Decode(rest)
	return key, err == nil
}

// LeaseID returns the Azure lease ID that the acquisition with owner id
// owner proposes: a GUID made from the owner's SHA-256 (version 8,
// RFC 9562). fence owner ids are unique per acquisition and unguessable,
// and so are their lease IDs; only the acquisition that owns a lease can
// renew or release it. The owner id itself is kept in the blob's metadata,
// where Inspect reads it.
func LeaseID(owner string) string {
	b := sha256.Sum256([]byte(owner))
	b[6] = b[6]&0x0f | 0x80 // version 8: custom
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
