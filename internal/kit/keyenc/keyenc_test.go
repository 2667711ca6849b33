package keyenc

import (
	"strings"
	"testing"
)

var slashFree = Alphabet{Escape: '%', Keep: func(b byte) bool { return b > 0x20 && b < 0x7f && b != '/' }}

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
	for _, s := range []string{"%", "%2", "%zz", "%2f", "a/b", "a b"} {
		if d, err := slashFree.Decode(s); err == nil {
			t.Errorf("Decode(%q) = %q; want an error", s, d)
		}
	}
}
