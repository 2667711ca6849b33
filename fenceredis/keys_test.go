package fenceredis

import (
	"strings"
	"testing"
)

// hashTag returns the part of name Redis Cluster hashes: the content of the
// first {...} if non-empty, else the whole name.
func hashTag(name string) string {
	i := strings.IndexByte(name, '{')
	if i < 0 {
		return name
	}
	j := strings.IndexByte(name[i+1:], '}')
	if j <= 0 {
		return name
	}
	return name[i+1 : i+1+j]
}

func TestLockNamesShareOneTagWhateverTheKey(t *testing.T) {
	keys := []string{
		"plain", "{tag}", "{tag}x", "x{tag}", "{}", "}{", "a}b", "a{b", "{{a}}", "%7B", "%", "%%7D",
		"orders/42", "ключ", "{", "}", "a{}b", "{a}{b}",
	}
	seen := map[string]string{}
	for _, key := range keys {
		n := lockNames(DefaultPrefix, key)
		tag := hashTag(n.lock)
		for _, name := range []string{n.counter, n.channel} {
			if got := hashTag(name); got != tag {
				t.Errorf("key %q: %s hashes on %q, the lock %s on %q: not one slot", key, name, got, n.lock, tag)
			}
		}
		if tag != escaped.Encode(key) {
			t.Errorf("key %q: lock %s hashes on %q; want the escaped key %q", key, n.lock, tag, escaped.Encode(key))
		}
		if other, dup := seen[n.lock]; dup {
			t.Errorf("keys %q and %q share the lock name %s", key, other, n.lock)
		}
		seen[n.lock] = key
		got, ok := keyOfLock(DefaultPrefix, n.lock)
		if !ok || got != key {
			t.Errorf("keyOfLock(%s) = %q, %v; want %q", n.lock, got, ok, key)
		}
		for _, name := range []string{n.counter, n.channel} {
			if k, ok := keyOfLock(DefaultPrefix, name); ok {
				t.Errorf("keyOfLock(%s) = %q: not a lock name", name, k)
			}
		}
	}
	// A user key that looks like another key's companion stays apart.
	a, b := lockNames(DefaultPrefix, "k"), lockNames(DefaultPrefix, "k}:token")
	if a.counter == b.lock || hashTag(a.counter) == hashTag(b.lock) {
		t.Errorf("key %q collides with the counter of %q", "k}:token", "k")
	}
}

func TestUnescapeRefusesBadEscapes(t *testing.T) {
	for _, bad := range []string{"%", "%7", "%41", "a%zz"} {
		if _, err := escaped.Decode(bad); err == nil {
			t.Errorf("escaped.Decode(%q) succeeded", bad)
		}
	}
}

func TestBadOptionsRefused(t *testing.T) {
	rdb := newClient("127.0.0.1:1")
	defer rdb.Close()
	if _, err := New(rdb, WithPrefix("app{x}:")); err == nil {
		t.Error("New with a prefix containing braces succeeded")
	}
	if _, err := New(rdb, WithTokenRetention(0)); err == nil {
		t.Error("New with zero token retention succeeded")
	}
}
