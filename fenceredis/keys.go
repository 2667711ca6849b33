package fenceredis

import (
	"fmt"
	"strings"

	"github.com/fencing/fence/internal/kit/keyenc"
)

// Key layout. For a lock key K and the prefix P (default "fence:"):
//
//	P{E}            the lock: a string holding the owner id and the holder's
//	                metadata (lockValue), with the lease's TTL
//	P{E}:token      the token counter: the last token issued, so the
//	                holder's while the lock exists; outlives the lock by
//	                the retention
//	P{E}:released   the pub/sub channel a release is announced on
//
// E is K with '%', '{' and '}' percent-encoded, so it holds no brace: the
// hash tag of all three names is exactly E, whatever K contains, and they
// live in one Redis Cluster slot. The encoding is one-to-one, so distinct
// keys stay distinct; only the lock name ends in '}', so a SCAN for locks
// does not see the others.

// DefaultPrefix starts the name of every key fenceredis writes for locks.
const DefaultPrefix = "fence:"

type names struct {
	lock, counter, channel string
}

func lockNames(prefix, key string) names {
	lock := prefix + "{" + escaped.Encode(key) + "}"
	// The three names are substrings of one string: one allocation, not
	// three, on every acquisition.
	all := lock + lock + ":token" + lock + ":released"
	n := len(lock)
	return names{
		lock:    all[:n],
		counter: all[n : 2*n+len(":token")],
		channel: all[2*n+len(":token"):],
	}
}

// escaped percent-encodes '%', '{' and '}'.
var escaped = keyenc.New('%', keyenc.AllBut("{}"))

// keyOfLock returns the lock key that the lock name name (as lockNames
// makes it with prefix) stands for; false if name is not a lock name.
func keyOfLock(prefix, name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, prefix+"{")
	if !ok || !strings.HasSuffix(rest, "}") {
		return "", false
	}
	rest = rest[:len(rest)-1]
	if strings.ContainsAny(rest, "{}") {
		return "", false
	}
	key, err := escaped.Decode(rest)
	return key, err == nil
}

// lockPattern is the SCAN MATCH pattern for the lock names of every key
// that starts with keyPrefix.
func lockPattern(prefix, keyPrefix string) string {
	return globEscape(prefix+"{"+escaped.Encode(keyPrefix)) + "*}"
}

// globEscape escapes the characters Redis glob patterns treat specially.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*', '?', '[', ']', '\\', '^', '-':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func checkPrefix(prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return fmt.Errorf("fenceredis: prefix %q must not contain '{' or '}': it would change the hash tag of the keys", prefix)
	}
	return nil
}
