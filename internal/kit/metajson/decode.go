package metajson

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// Decode returns the metadata in s, a JSON object of strings as Encode
// writes it; nil if s is empty or not such an object (metadata is
// informational: a holder whose metadata cannot be read is still a
// holder). It gives what json.Unmarshal into a map[string]string gives.
//
// Drivers decode a holder's metadata whenever an acquisition is refused,
// so every waiter that loses a race for a released key pays for it. The
// common form, an object without blanks whose strings hold no escape, no
// control character and only valid UTF-8, is read by hand, its keys and
// values substrings of s; anything else goes to json.Unmarshal.
func Decode(s string) map[string]string {
	if s == "" {
		return nil
	}
	if m, ok := decodePlain(s); ok {
		return m
	}
	var m map[string]string
	if json.Unmarshal([]byte(s), &m) != nil {
		return nil
	}
	return m
}

// decodePlain reads s if it is {"k":"v",...} with plain strings (see
// Decode); ok is false for anything else, which it leaves to
// json.Unmarshal.
func decodePlain(s string) (m map[string]string, ok bool) {
	if len(s) < 2 || s[0] != '{' || s[len(s)-1] != '}' {
		return nil, false
	}
	body := s[1 : len(s)-1]
	m = make(map[string]string, strings.Count(body, `":"`))
	for body != "" {
		k, rest, ok := plainString(body)
		if !ok || rest == "" || rest[0] != ':' {
			return nil, false
		}
		v, rest, ok := plainString(rest[1:])
		if !ok {
			return nil, false
		}
		m[k] = v
		if rest == "" {
			break
		}
		if rest[0] != ',' || len(rest) == 1 {
			return nil, false
		}
		body = rest[1:]
	}
	return m, true
}

// plainString reads the JSON string at the start of s if it needs no
// decoding, and returns its content and what follows it.
func plainString(s string) (str, rest string, ok bool) {
	if s == "" || s[0] != '"' {
		return "", "", false
	}
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			str = s[1:i]
			return str, s[i+1:], utf8.ValidString(str)
		case c == '\\' || c < 0x20:
			return "", "", false
		}
	}
	return "", "", false
}
