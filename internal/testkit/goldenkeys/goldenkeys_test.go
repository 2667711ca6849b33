package goldenkeys_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/fencing/fence/internal/testkit/goldenkeys"
)

// recorder keeps the errors a check reports instead of failing the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

var hashed = regexp.MustCompile(`^h\.[0-9a-f]{64}$`)

func hash(k string) string {
	sum := sha256.Sum256([]byte(k))
	return "h." + hex.EncodeToString(sum[:])
}

// TestShape: Shape passes a naming that keeps its promises, and catches
// one broken way of each.
func TestShape(t *testing.T) {
	keys := []string{"x", "y"}
	for _, c := range []struct {
		name string
		fn   func(string) string
		want string // a piece of the error; "" for none
	}{
		{"good", hash, ""},
		{"too long", func(k string) string { return hash(k) + strings.Repeat("0", 100) }, "is 166 bytes; the limit is 66"},
		{"misshaped", func(k string) string { return "H" + hash(k)[1:] }, "not plain ASCII of the expected shape"},
		{"shared", func(k string) string { return hash(k[:min(len(k), 3)]) }, "share name"},
	} {
		r := &recorder{TB: t}
		goldenkeys.Shape(r, "name", c.fn, 66, "bytes", hashed, keys)
		got := strings.Join(r.errs, "\n")
		switch {
		case c.want == "" && got != "":
			t.Errorf("%s: Shape reported:\n%s", c.name, got)
		case c.want != "" && !strings.Contains(got, c.want):
			t.Errorf("%s: Shape reported %q; want an error with %q", c.name, got, c.want)
		}
	}
}
