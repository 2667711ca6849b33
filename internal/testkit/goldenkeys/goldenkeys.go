// Package goldenkeys pins the names stores give keys. A store's name for a
// key is its users' data: a lock written under one name by one release must
// be found under the same name by the next. A golden file in the store's
// testdata holds, for every key of Keys, the names the store gives it
// today; Check fails when a change renames any of them.
//
// To write a golden file for a new store (never to accept a renaming of an
// existing one), run its test with FENCE_UPDATE_GOLDEN=1.
package goldenkeys

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// Keys returns keys that trip up escapers: path syntax, dots, escape
// bytes of every store, Unicode, whitespace and control bytes, case
// variants and keys longer than any store's name limit.
func Keys() []string {
	return []string{
		"a",
		"jobs/nightly-backup",
		"jobs/",
		"/",
		"//",
		"/etc/passwd",
		"../../etc/passwd",
		".",
		"..",
		"...",
		".hidden",
		"trailing.",
		"trailing/",
		"a.b.c",
		`back\slash`,
		"Key",
		"key",
		"KEY",
		"kEy",
		"ключ-ünïcödé-鍵",
		"e\u0301", // e + combining acute
		"\u00e9",  // precomposed é: the same text in NFC, another key
		"spaces and\ttabs\nnewline",
		" leading space",
		"\x00nul\x7fdel\xff",
		"%",
		"%25",
		"%2F",
		"~7E",
		"=3D",
		"{tag}",
		"{",
		"}",
		"a:b",
		"#hash",
		"*?[]^-\\",
		"under_score-dash",
		"tenant-42/queue:7/item.9",
		strings.Repeat("x", 47),
		strings.Repeat("x", 48),
		strings.Repeat("x", 49),
		strings.Repeat("x", 59),
		strings.Repeat("x", 60),
		strings.Repeat("/", 20),
		strings.Repeat("x", 1019),
		strings.Repeat("x", 1020),
		strings.Repeat("x", 1021),
		strings.Repeat("x", 1023) + "/",
		strings.Repeat("/", 340),
		strings.Repeat("/", 341),
		strings.Repeat("é", 200),
		strings.Repeat("x", 10<<10),
		strings.Repeat("x", 10<<10-1) + "y",
		strings.Repeat("ab/", 1000),
		strings.Repeat("é", 16<<10/2), // fence.MaxKeyLen
	}
}

// Check compares the names each key of Keys gets from names (one or more
// per key, for stores that derive several) with the golden file
// testdata/<file>.
func Check(t *testing.T, file string, names func(key string) []string) {
	t.Helper()
	var b strings.Builder
	for _, k := range Keys() {
		b.WriteString(show(k))
		for _, n := range names(k) {
			b.WriteByte(' ')
			b.WriteString(show(n))
		}
		b.WriteByte('\n')
	}
	got := b.String()
	path := filepath.Join("testdata", file)
	if os.Getenv("FENCE_UPDATE_GOLDEN") == "1" {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with FENCE_UPDATE_GOLDEN=1 to write it for a new store)", err)
	}
	gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
	if len(gl) != len(wl) {
		t.Fatalf("%s: %d lines; golden file has %d", path, len(gl), len(wl))
	}
	for i := range gl {
		if gl[i] != wl[i] {
			t.Errorf("%s line %d: names changed: stored locks would be lost\n got: %.300s\nwant: %.300s", path, i+1, gl[i], wl[i])
		}
	}
}

// show writes s as a quoted string, or, when it is long, as its length
// and SHA-256: as exact a pin, in a file a reviewer can read.
func show(s string) string {
	if len(s) <= 200 {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("<%d bytes, sha256 %x>", len(s), sha256.Sum256([]byte(s)))
}

// One is a names function for stores that give a key a single name.
func One(name func(key string) string) func(string) []string {
	return func(k string) []string { return []string{name(k)} }
}

// Shape checks the names a store gives keys (and the keys of Keys):
// each fits limit (len in bytes, the unit for messages), has the shape
// the store expects, and no two keys share one. what names the name in
// messages ("partition key", "blob").
func Shape(t testing.TB, what string, name func(key string) string, limit int, unit string, shape *regexp.Regexp, keys []string) {
	t.Helper()
	seen := map[string]string{}
	for _, k := range append(keys, Keys()...) {
		n := name(k)
		if len(n) > limit {
			t.Errorf("the %s of %.30q is %d %s; the limit is %d", what, k, len(n), unit, limit)
		}
		if !shape.MatchString(n) {
			t.Errorf("the %s of %.30q = %.60q: not plain ASCII of the expected shape", what, k, n)
		}
		if prev, dup := seen[n]; dup && prev != k {
			t.Errorf("keys %.30q and %.30q share %s %.60q", prev, k, what, n)
		}
		seen[n] = k
	}
}
