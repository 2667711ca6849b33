// Package keyenc escapes fence keys into the names a store accepts, so that
// distinct keys stay distinct names and no key can nest inside another
// (with "/" escaped, "a" and "a/b" are siblings, not parent and child).
// It is the one escaper of every store; a store says only which bytes its
// names may hold (New), and cuts or hashes names that would exceed its
// length limit with EncodePrefix.
//
// Escaping is byte-wise: every byte the store's alphabet does not keep, and
// the escape byte itself, becomes the escape byte and two upper-case hex
// digits. Because it works byte by byte, the escaped form of a prefix is a
// prefix of the escaped form of every key that starts with it, which lets
// stores with range reads list keys by prefix. Escaping is case-preserving;
// a store whose names ignore case keeps only Lower bytes, or hashes.
package keyenc

import (
	"fmt"
	"strings"
)

// Alphabet is the set of bytes a store keeps as they are, and the byte that
// starts an escape. Its methods are safe for concurrent use.
type Alphabet struct {
	escape byte
	keep   [256]bool // anywhere
	first  [256]bool // at the start of a name
}

// New returns the alphabet that keeps the bytes keep accepts, other than
// escape, and escapes all others with escape.
func New(escape byte, keep func(b byte) bool) *Alphabet {
	a := &Alphabet{escape: escape}
	for i := range 256 {
		a.keep[i] = byte(i) != escape && keep(byte(i))
	}
	a.first = a.keep
	return a
}

// NotFirst returns a copy of a that also escapes the bytes of s when they
// start a name (as a file system needs for '.').
func (a *Alphabet) NotFirst(s string) *Alphabet {
	b := *a
	for i := 0; i < len(s); i++ {
		b.first[s[i]] = false
	}
	return &b
}

// Alnum keeps ASCII letters, digits and the bytes of extra.
func Alnum(extra string) func(byte) bool {
	return func(b byte) bool {
		return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || strings.IndexByte(extra, b) >= 0
	}
}

// Lower keeps lower-case ASCII letters, digits and the bytes of extra: the
// alphabet of a store whose names ignore case, where a name with an
// upper-case letter would meet another key's.
func Lower(extra string) func(byte) bool {
	return func(b byte) bool {
		return 'a' <= b && b <= 'z' || '0' <= b && b <= '9' || strings.IndexByte(extra, b) >= 0
	}
}

// Printable keeps printable ASCII but space and the bytes of except.
func Printable(except string) func(byte) bool {
	return func(b byte) bool { return b > 0x20 && b < 0x7f && strings.IndexByte(except, b) < 0 }
}

// AllBut keeps every byte but those of except.
func AllBut(except string) func(byte) bool {
	return func(b byte) bool { return strings.IndexByte(except, b) < 0 }
}

const hexDigits = "0123456789ABCDEF"

func (a *Alphabet) keeps(s string, i int) bool {
	if i == 0 {
		return a.first[s[0]]
	}
	return a.keep[s[i]]
}

// EncodedLen returns len(a.Encode(s)) without building it.
func (a *Alphabet) EncodedLen(s string) int {
	n := len(s)
	for i := 0; i < len(s); i++ {
		if !a.keeps(s, i) {
			n += 2
		}
	}
	return n
}

// Keeps reports whether a keeps every byte of s, so that a.Encode(s) is s.
func (a *Alphabet) Keeps(s string) bool { return a.EncodedLen(s) == len(s) }

// Encode escapes s.
func (a *Alphabet) Encode(s string) string {
	n := a.EncodedLen(s)
	if n == len(s) {
		return s
	}
	return a.encode(s, n)
}

// EncodePrefix returns the longest prefix of a.Encode(s) that has at most
// max bytes and does not split an escape: the readable part of a name
// whose store cannot hold the whole of it.
func (a *Alphabet) EncodePrefix(s string, max int) string {
	n := 0
	for i := 0; i < len(s); i++ {
		w := 1
		if !a.keeps(s, i) {
			w = 3
		}
		if n+w > max {
			return a.Encode(s[:i])
		}
		n += w
	}
	return a.Encode(s)
}

func (a *Alphabet) encode(s string, n int) string {
	var b strings.Builder
	b.Grow(n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if a.keeps(s, i) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte(a.escape)
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// Decode reverses Encode. It fails on every string Encode does not make:
// a malformed escape, an escape of a byte Encode keeps as it is, or a byte
// Encode never leaves unescaped.
func (a *Alphabet) Decode(s string) (string, error) {
	if strings.IndexByte(s, a.escape) < 0 {
		for i := 0; i < len(s); i++ {
			if !a.keeps(s, i) {
				return "", fmt.Errorf("keyenc: byte %q at %d of %q is not in the alphabet", s[i], i, s)
			}
		}
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != a.escape {
			if !a.keeps(s, i) {
				return "", fmt.Errorf("keyenc: byte %q at %d of %q is not in the alphabet", c, i, s)
			}
			b.WriteByte(c)
			continue
		}
		if i+2 >= len(s) {
			return "", fmt.Errorf("keyenc: truncated escape at %d of %q", i, s)
		}
		hi, lo := unhex(s[i+1]), unhex(s[i+2])
		if hi < 0 || lo < 0 {
			return "", fmt.Errorf("keyenc: bad escape %q at %d of %q", s[i:i+3], i, s)
		}
		d := byte(hi<<4 | lo)
		if i == 0 && a.first[d] || i > 0 && a.keep[d] {
			return "", fmt.Errorf("keyenc: escape %q at %d of %q stands for a byte that is never escaped there", s[i:i+3], i, s)
		}
		b.WriteByte(d)
		i += 2
	}
	return b.String(), nil
}

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
