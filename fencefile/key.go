package fencefile

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"github.com/fencing/fence/internal/kit/keyenc"
)

// lockSuffix ends the name of every lock file in a store's directory.
const lockSuffix = ".lock"

// maxReadable bounds the readable part of a lock file's name, so that a
// name stays far below every file system's 255-byte limit.
const maxReadable = 48

// fileName returns the name of key's lock file: a readable, escaped prefix
// of the key, a dot, 32 hex digits of the key's SHA-256, and ".lock".
//
// The name is safe for any key: it never contains a path separator, never
// starts with a dot, and is ASCII only, so no key (such as "../x", "." or
// a 10 KB key) can reach outside the directory, and Unicode normalization
// by the file system changes nothing. Two distinct keys never share a
// file: the hash covers the whole key, byte for byte, and is lowercase, so
// keys that differ only in case map to different files even on a
// case-insensitive file system. The full key is stored in the record, so a
// hash collision would be detected, not silently shared.
func fileName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return names.EncodePrefix(key, maxReadable) + "." + hex.EncodeToString(sum[:16]) + lockSuffix
}

// names keeps letters, digits, '-', '_' and '.', but not a leading '.'.
var names = keyenc.New('%', keyenc.Alnum("-_.")).NotFirst(".")

// isLockName reports whether name has the shape fileName gives.
func isLockName(name string) bool {
	rest, ok := strings.CutSuffix(name, lockSuffix)
	if !ok {
		return false
	}
	i := strings.LastIndexByte(rest, '.')
	if i < 0 || len(rest)-i-1 != 32 {
		return false
	}
	for _, c := range []byte(rest[i+1:]) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
