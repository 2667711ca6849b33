package fenceazblob

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/testkit/goldenkeys"
)

var nameShape = regexp.MustCompile(`^(key/[A-Za-z0-9_~-]+|hash/[0-9a-f]{64})$`)

func TestBlobName(t *testing.T) {
	keys := []string{
		"plain", "Plain", "PLAIN", "a/b", "a/b/", "a//b", ".", "..", "../../etc/passwd", "/abs",
		"with space", "~", "~7E", "%41", "A", "q?", "x#y", "ключ", "鍵🔒", "e\u0301", "\u00e9",
		"trailing.", "back\\slash", "\x01ctl",
		strings.Repeat("L", 1020), strings.Repeat("L", 1021), strings.Repeat("/", 340),
		strings.Repeat("/", 339) + "x", strings.Repeat("k", fence.MaxKeyLen),
		strings.Repeat("k", fence.MaxKeyLen-1) + "j",
	}
	goldenkeys.Shape(t, "blob", BlobName, maxBlobName, "characters", nameShape, keys)
	for _, k := range keys {
		n := BlobName(k)
		if BlobName(k) != n {
			t.Errorf("BlobName(%.30q) is not deterministic", k)
		}
		if got, ok := keyFromName(n); strings.HasPrefix(n, escapedPrefix) && (!ok || got != k) {
			t.Errorf("keyFromName(BlobName(%.30q)) = %.30q, %v", k, got, ok)
		}
	}
	// Escaping keeps prefixes: List lists by the escaped prefix.
	if p, n := BlobName("jobs/"), BlobName("jobs/nightly"); !strings.HasPrefix(n, p) {
		t.Errorf("BlobName(jobs/nightly) = %q does not start with BlobName(jobs/) = %q", n, p)
	}
	if BlobName(strings.Repeat("L", 1020)) != "key/"+strings.Repeat("L", 1020) {
		t.Errorf("a key whose escaped name fits 1024 characters is hashed")
	}
	for _, bad := range []string{"key/", "key/~4", "key/~41", "key/~zz", "hash/00", "other"} {
		if k, ok := keyFromName(bad); ok {
			t.Errorf("keyFromName(%q) = %q; want no key", bad, k)
		}
	}
}

var guid = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestLeaseID(t *testing.T) {
	a, b := LeaseID("0123456789abcdef0123456789abcdef"), LeaseID("worker-0123456789abcdef0123456789abcdef")
	for _, id := range []string{a, b} {
		if !guid.MatchString(id) {
			t.Errorf("LeaseID = %q; want a version 8 GUID", id)
		}
	}
	if a == b {
		t.Errorf("distinct owners share lease ID %s", a)
	}
	if LeaseID("0123456789abcdef0123456789abcdef") != a {
		t.Errorf("LeaseID is not deterministic")
	}
}

func TestLeaseSeconds(t *testing.T) {
	for ttl, want := range map[string]int32{
		"15s": 15, "14.001s": 15, "14200ms": 15, "15.5s": 16, "30s": 30, "59.5s": 60, "60s": 60,
	} {
		d, _ := time.ParseDuration(ttl)
		got, err := leaseSeconds(d)
		if err != nil || got != want {
			t.Errorf("leaseSeconds(%s) = %d, %v; want %d", ttl, got, err, want)
		}
		if got := int64(got) * 1e9; got < int64(d) {
			t.Errorf("leaseSeconds(%s) grants less than asked", ttl)
		}
	}
}
