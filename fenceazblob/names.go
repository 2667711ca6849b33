package fenceazblob

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
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

// BlobName returns the name of the blob that holds key's lease and token
// counter in the store's container. Distinct keys have distinct names.
func BlobName(key string) string {
	if n := escapedLen(key); len(escapedPrefix)+n <= maxBlobName {
		return escapedPrefix + escape(key, n)
	}
	sum := sha256.Sum256([]byte(key))
	return hashedPrefix + hex.EncodeToString(sum[:])
}

func plain(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_'
}

func escapedLen(s string) int {
	n := 0
	for i := 0; i < len(s); i++ {
		if plain(s[i]) {
			n++
		} else {
			n += 3
		}
	}
	return n
}

const upperHex = "0123456789ABCDEF"

func escape(s string, n int) string {
	var b strings.Builder
	b.Grow(n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if plain(c) {
			b.WriteByte(c)
		} else {
			b.WriteByte('~')
			b.WriteByte(upperHex[c>>4])
			b.WriteByte(upperHex[c&15])
		}
	}
	return b.String()
}

// keyFromName returns the key of a blob named by BlobName, for names of
// the escaped form; false for hashed names and names fence did not make.
func keyFromName(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, escapedPrefix)
	if !ok || rest == "" {
		return "", false
	}
	b := make([]byte, 0, len(rest))
	for i := 0; i < len(rest); i++ {
		c := rest[i]
		if plain(c) {
			b = append(b, c)
			continue
		}
		if c != '~' || i+2 >= len(rest) {
			return "", false
		}
		hi, lo := strings.IndexByte(upperHex, rest[i+1]), strings.IndexByte(upperHex, rest[i+2])
		if hi < 0 || lo < 0 || plain(byte(hi<<4|lo)) {
			return "", false // not a name BlobName makes
		}
		b = append(b, byte(hi<<4|lo))
		i += 2
	}
	return string(b), true
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
