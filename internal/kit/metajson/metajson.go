// Package metajson encodes lease metadata (a map[string]string) as JSON
// for the drivers that store it, without encoding/json's allocations.
package metajson

import (
	"slices"
	"unicode/utf8"
	"unsafe"
)

// Encode returns meta as a JSON object with sorted keys, byte for byte
// what json.Marshal writes, or "" if meta is empty. It is built by hand:
// json.Marshal of a map allocates several times (docs/performance.md),
// and drivers encode the holder's metadata on every acquisition.
func Encode(meta map[string]string) string {
	if len(meta) == 0 {
		return ""
	}
	b := Append(nil, meta)
	return unsafe.String(unsafe.SliceData(b), len(b)) // b is never written again
}

// Size is about the length of meta's encoding: exact unless a key or a
// value needs escapes.
func Size(meta map[string]string) int {
	size := 2
	for k, v := range meta {
		size += len(k) + len(v) + 6
	}
	return size
}

type pair struct{ k, v string }

// Append appends what Encode returns for meta to b, growing b once for
// all of it (unless escapes make it longer).
func Append(b []byte, meta map[string]string) []byte {
	if len(meta) == 0 {
		return b
	}
	// One pass over the map; metadata has a handful of keys, so the pairs
	// stay on the stack and an insertion sort is the quickest.
	var small [8]pair
	ps := small[:0]
	size := 2
	for k, v := range meta {
		ps = append(ps, pair{k, v})
		size += len(k) + len(v) + 6
		for i := len(ps) - 1; i > 0 && ps[i].k < ps[i-1].k; i-- {
			ps[i], ps[i-1] = ps[i-1], ps[i]
		}
	}
	b = slices.Grow(b, size)
	b = append(b, '{')
	for i, p := range ps {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, p.k)
		b = append(b, ':')
		b = appendJSONString(b, p.v)
	}
	return append(b, '}')
}

// AppendString appends s as a JSON string, as json.Marshal writes it.
func AppendString(b []byte, s string) []byte { return appendJSONString(b, s) }

// plain reports whether c stands for itself in a JSON string as
// json.Marshal writes it: printable ASCII other than '"', '\\' and the
// characters it escapes for HTML.
func plain(c byte) bool {
	return c >= 0x20 && c < utf8.RuneSelf && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
}

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes
// U+FFFD, as with encoding/json.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
		// Copy the run of bytes that need no escape in one go.
		j := i
		for j < len(s) && plain(s[j]) {
			j++
		}
		b = append(b, s[i:j]...)
		if i = j; i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c == '\n':
				b = append(b, '\\', 'n')
			case c == '\r':
				b = append(b, '\\', 'r')
			case c == '\t':
				b = append(b, '\\', 't')
			case c == '\b':
				b = append(b, '\\', 'b')
			case c == '\f':
				b = append(b, '\\', 'f')
			case c < 0x20 || c == '<' || c == '>' || c == '&':
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
