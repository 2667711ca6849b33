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
// json.Marshal of a map costs about ten allocations, and drivers encode
// the holder's metadata on every acquisition.
func Encode(meta map[string]string) string {
	if len(meta) == 0 {
		return ""
	}
	b := Append(make([]byte, 0, Size(meta)), meta)
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

// Append appends what Encode returns for meta to b.
func Append(b []byte, meta map[string]string) []byte {
	if len(meta) == 0 {
		return b
	}
	var small [8]string
	keys := small[:0]
	for k := range meta {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, k)
		b = append(b, ':')
		b = appendJSONString(b, meta[k])
	}
	return append(b, '}')
}

// AppendString appends s as a JSON string, as json.Marshal writes it.
func AppendString(b []byte, s string) []byte { return appendJSONString(b, s) }

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes
// U+FFFD, as with encoding/json.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); {
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
