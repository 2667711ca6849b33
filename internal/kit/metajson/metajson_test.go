package metajson

import (
	"encoding/json"
	"testing"
)

// Encode writes what json.Marshal writes for the same map.
func TestEncodeIsJSON(t *testing.T) {
	for _, m := range []map[string]string{
		{"host": "h1", "pid": "42", "acquired_at": "2026-12-01T02:03:04.123456789Z"},
		{"a\"b": "c\\d", "ctl": "\x00\x01\n\t\r\b\f\x1f", "html": "<a href='x'>&</a>"},
		{"bad utf-8": "\xff\xfe ok", "é": "ü€𝄞", "sep": "\u2028\u2029"},
		{"": ""},
		{"z": "1", "a": "2", "m": "3", "b": "4", "y": "5", "c": "6", "x": "7", "d": "8", "w": "9", "e": "10"},
	} {
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := Encode(m); got != string(want) {
			t.Errorf("Encode(%q)\n got %s\nwant %s", m, got, want)
		}
		if got := Append([]byte("prefix"), m); string(got) != "prefix"+string(want) {
			t.Errorf("Append(prefix, %q)\n got %s\nwant prefix%s", m, got, want)
		}
		for k, v := range m {
			for _, s := range []string{k, v} {
				want, _ := json.Marshal(s)
				if got := AppendString(nil, s); string(got) != string(want) {
					t.Errorf("AppendString(%q) = %s, want %s", s, got, want)
				}
			}
		}
	}
	if got := Encode(nil); got != "" {
		t.Errorf("Encode(nil) = %q, want empty", got)
	}
}
