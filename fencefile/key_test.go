package fencefile

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence"
)

var awkwardKeys = []string{
	"../../etc/passwd",
	"/etc/passwd",
	".",
	"..",
	".hidden",
	"a/b/c",
	`back\slash`,
	"Key",
	"key",
	"KEY",
	"ключ-ünïcödé-鍵",
	"e\u0301", // e + combining acute
	"\u00e9",  // precomposed é: the same text in NFC, another key
	"spaces and\ttabs\nnewline",
	"%2F",
	"/",
	strings.Repeat("x", 10<<10),
	strings.Repeat("x", 10<<10-1) + "y",
	strings.Repeat("é", fence.MaxKeyLen/2),
}

func TestFileNameIsSafeAndDistinct(t *testing.T) {
	seen := map[string]string{}
	for _, key := range awkwardKeys {
		name := fileName(key)
		if strings.ContainsAny(name, `/\`) || strings.HasPrefix(name, ".") || len(name) > 128 {
			t.Errorf("fileName(%.40q) = %q: not a safe single name", key, name)
		}
		for _, r := range name {
			if r > 0x7e || r < 0x21 {
				t.Errorf("fileName(%.40q) = %q: not printable ASCII", key, name)
				break
			}
		}
		if !isLockName(name) {
			t.Errorf("isLockName(fileName(%.40q)) = false", key)
		}
		// Distinct even where the file system ignores case.
		folded := strings.ToLower(name)
		if other, ok := seen[folded]; ok {
			t.Errorf("keys %.40q and %.40q share lock file %q", key, other, name)
		}
		seen[folded] = key
	}
	if got := fileName("jobs/nightly-backup"); !strings.HasPrefix(got, "jobs%2Fnightly-backup.") {
		t.Errorf("fileName is not readable: %q", got)
	}
}

// Every awkward key can be taken, its lock file lands directly in the
// store's directory, and List gives the keys back exactly.
func TestAwkwardKeysStayInside(t *testing.T) {
	ctx := context.Background()
	parent := t.TempDir()
	s, err := New(parent + "/store")
	if err != nil {
		t.Fatal(err)
	}
	var claims []fence.Claim
	defer func() {
		for _, c := range claims {
			c.Release(ctx)
		}
	}()
	for _, key := range awkwardKeys {
		c, err := s.TryAcquire(ctx, fence.Request{Key: key, Owner: "o", TTL: time.Minute})
		if err != nil {
			t.Fatalf("TryAcquire(%.40q): %v", key, err)
		}
		claims = append(claims, c)
	}
	entries, _ := os.ReadDir(parent)
	if len(entries) != 1 {
		t.Errorf("files outside the store directory: %v", entries)
	}
	entries, _ = os.ReadDir(s.Dir())
	if len(entries) != len(awkwardKeys) {
		t.Errorf("%d lock files for %d keys", len(entries), len(awkwardKeys))
	}
	hs, err := s.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, h := range hs {
		got[h.Key] = true
	}
	for _, key := range awkwardKeys {
		if !got[key] {
			t.Errorf("List lacks %.40q", key)
		}
	}
}

// A lock file whose record names another key (a hash collision, or a
// foreign file) is refused, never shared.
func TestCollisionDetected(t *testing.T) {
	ctx := context.Background()
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(s.Path("mine"))
	if err != nil {
		t.Fatal(err)
	}
	if err := writeRecord(f, record{Key: "theirs", Token: 7}, false); err != nil {
		t.Fatal(err)
	}
	f.Close()
	_, err = s.TryAcquire(ctx, fence.Request{Key: "mine", Owner: "o", TTL: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "theirs") {
		t.Fatalf("TryAcquire on a colliding file = %v, want a collision error", err)
	}
}
