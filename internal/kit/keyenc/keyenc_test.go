package keyenc

import (
	"strings"
	"testing"
)

var slashFree = New('%', Printable("/"))

func TestRoundTripAndDistinct(t *testing.T) {
	keys := []string{
		"a", "a/b", "a%2Fb", "a/b/", "%", "%%", "%2", ".", "..", "ключ", "鍵🔒",
		"with space", "tab\tx", "\x7f", "A", "a2Fb", strings.Repeat("/", 10),
	}
	seen := map[string]string{}
	for _, k := range keys {
		e := slashFree.Encode(k)
		if strings.ContainsRune(e, '/') {
			t.Errorf("Encode(%q) = %q contains '/'", k, e)
		}
		if prev, ok := seen[e]; ok {
			t.Errorf("Encode(%q) = Encode(%q) = %q", k, prev, e)
		}
		seen[e] = k
		d, err := slashFree.Decode(e)
		if err != nil || d != k {
			t.Errorf("Decode(Encode(%q)) = %q, %v", k, d, err)
		}
	}
}

func TestPrefixPreserved(t *testing.T) {
	for _, p := range []string{"a", "a/", "jobs/ключ", "x%"} {
		for _, rest := range []string{"", "b", "/c", "%d"} {
			if e, ep := slashFree.Encode(p+rest), slashFree.Encode(p); !strings.HasPrefix(e, ep) {
				t.Errorf("Encode(%q) = %q does not start with Encode(%q) = %q", p+rest, e, p, ep)
			}
		}
	}
}

func TestDecodeRejectsMalformed(t *testing.T) {
	for _, s := range []string{"%", "%2", "%zz", "%2f", "a/b", "a b", "%41", "a%2E"} {
		if d, err := slashFree.Decode(s); err == nil {
			t.Errorf("Decode(%q) = %q; want an error", s, d)
		}
	}
}

// files escapes a leading '.', as fencefile does.
var files = New('%', Alnum("-_.")).NotFirst(".")

func TestNotFirst(t *testing.T) {
	for k, want := range map[string]string{".": "%2E", "..": "%2E.", "a.b": "a.b", ".a.": "%2Ea.", "": ""} {
		if got := files.Encode(k); got != want {
			t.Errorf("Encode(%q) = %q; want %q", k, got, want)
		}
		if d, err := files.Decode(want); err != nil || d != k {
			t.Errorf("Decode(%q) = %q, %v; want %q", want, d, err, k)
		}
	}
	for _, s := range []string{".", "..a", "a%2E"} {
		if d, err := files.Decode(s); err == nil {
			t.Errorf("Decode(%q) = %q; want an error", s, d)
		}
	}
}

func TestEncodePrefix(t *testing.T) {
	for _, k := range []string{"", "abc", "a/b/c", "//////", "ключ/x", ".a.b", strings.Repeat("x/", 40)} {
		for _, a := range []*Alphabet{slashFree, files} {
			e := a.Encode(k)
			if a.EncodedLen(k) != len(e) {
				t.Errorf("EncodedLen(%q) = %d; Encode gives %d bytes", k, a.EncodedLen(k), len(e))
			}
			for max := 0; max <= len(e)+1; max++ {
				p := a.EncodePrefix(k, max)
				if len(p) > max || !strings.HasPrefix(e, p) {
					t.Fatalf("EncodePrefix(%q, %d) = %q: not a prefix of %q of at most %d bytes", k, max, p, e, max)
				}
				if _, err := a.Decode(p); err != nil {
					t.Errorf("EncodePrefix(%q, %d) = %q splits an escape: %v", k, max, p, err)
				}
				if max >= len(e) && p != e || max < len(e) && len(p) < max-2 {
					t.Errorf("EncodePrefix(%q, %d) = %q: not the longest", k, max, p)
				}
			}
		}
	}
}

func TestKeepsAndLower(t *testing.T) {
	lower := New('%', Lower("_-"))
	for s, want := range map[string]bool{"": true, "a_b-9": true, "A": false, "a b": false, "%": false, "é": false} {
		if got := lower.Keeps(s); got != want {
			t.Errorf("Keeps(%q) = %v; want %v", s, got, want)
		}
		if got := lower.Encode(s) == s; got != want {
			t.Errorf("Encode(%q) == %q is %v; Keeps says %v", s, s, got, want)
		}
	}
}
