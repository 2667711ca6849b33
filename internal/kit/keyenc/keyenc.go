// Package keyenc escapes fence keys into the names a store accepts, so that
// distinct keys stay distinct names and no key can nest inside another
// (with "/" escaped, "a" and "a/b" are siblings, not parent and child).
//
// Escaping is byte-wise: every byte the store's alphabet does not keep, and
// the escape byte itself, becomes the escape byte and two upper-case hex
// digits. Because it works byte by byte, the escaped form of a prefix is a
// prefix of the escaped form of every key that starts with it, which lets
// stores with range reads list keys by prefix.
package keyenc

import (
	"fmt"
	"strings"
)

// Alphabet is the set of bytes a store keeps as they are, and the byte that
// starts an escape.
type Alphabet struct {
	// Escape starts an escape sequence. It is never kept as itself.
	Escape byte
	// Keep reports whether b may appear unescaped.
	Keep func(b byte) bool
}

const hexDigits = "0123456789ABCDEF"

// Encode escapes s.
func (a Alphabet) Encode(s string) string {
	n := 0
	for i := 0; i < len(s); i++ {
		if !a.keeps(s[i]) {
			n++
		}
	}
	if n == 0 {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2*n)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if a.keeps(c) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte(a.Escape)
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// Decode reverses Encode. It fails on a malformed escape or on a byte
// Encode never leaves unescaped.
func (a Alphabet) Decode(s string) (string, error) {
	if strings.IndexByte(s, a.Escape) < 0 {
		for i := 0; i < len(s); i++ {
			if !a.keeps(s[i]) {
				return "", fmt.Errorf("keyenc: byte %q at %d of %q is not in the alphabet", s[i], i, s)
			}
		}
		return s, nil
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != a.Escape {
			if !a.keeps(c) {
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
		b.WriteByte(byte(hi<<4 | lo))
		i += 2
	}
	return b.String(), nil
}

func (a Alphabet) keeps(c byte) bool { return c != a.Escape && a.Keep(c) }

func unhex(c byte) int {
	switch {
	case '0' <= c && c <= '9':
		return int(c - '0')
	case 'A' <= c && c <= 'F':
		return int(c-'A') + 10
	}
	return -1
}
