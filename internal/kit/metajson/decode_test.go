package metajson

import (
	"encoding/json"
	"maps"
	"testing"
)

// Decode reads what Encode writes, and agrees with json.Unmarshal on
// every input, plain or not: the hand-read path may only take inputs
// whose reading is unambiguous, and must refuse the rest.
func TestDecode(t *testing.T) {
	for _, m := range []map[string]string{
		{"host": "h1", "pid": "42", "acquired_at": "2026-12-07T13:35:48.123456789Z"},
		{"a": ""},
		{"": "empty key"},
		{"quote": `say "hi"`, "back": `a\b`, "nl": "x\ny", "html": "<&>", "é": "ü", "bad": "\xff"},
	} {
		if got := Decode(Encode(m)); !maps.Equal(got, m) && m["bad"] == "" {
			t.Errorf("Decode(Encode(%q)) = %q", m, got)
		}
		checkLikeUnmarshal(t, Encode(m))
	}
	for _, s := range []string{
		``, `{}`, `{"a":"b"}`, `{"a":"b",}`, `{"a":"b"`, `{"a":1}`, `{"a":null}`, `{ "a":"b"}`,
		`{"a":"b","a":"c"}`, `{"a":"b" }`, `{"a""b"}`, `{"a":"b",,"c":"d"}`, `{"a":"\u00e9"}`,
		`{"a":"\ud83d\ude00"}`, "{\"a\":\"\xff\"}", "{\"a\":\"\x01\"}", `{"a":"b"}x`, `[]`, `"a"`,
		`{"a":"b","c"}`, `{,}`, `{"a":"b":"c"}`, `{"a":"x\"y"}`,
	} {
		checkLikeUnmarshal(t, s)
	}
}

func checkLikeUnmarshal(t *testing.T, s string) {
	t.Helper()
	var want map[string]string
	if json.Unmarshal([]byte(s), &want) != nil {
		want = nil
	}
	got := Decode(s)
	if !maps.Equal(got, want) || (got == nil) != (want == nil) {
		t.Errorf("Decode(%q) = %#v; json.Unmarshal gives %#v", s, got, want)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"a":"b"}`, `{"host":"h","pid":"1"}`, `{"a":"\n"}`, `{}`, `{"a":1}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkLikeUnmarshal(t, s) })
}

func BenchmarkDecode(b *testing.B) {
	s := Encode(map[string]string{"host": "worker-17.example.internal", "pid": "48213", "acquired_at": "2026-12-07T13:35:48.123456789Z"})
	b.Run("Decode", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = Decode(s)
		}
	})
	b.Run("json.Unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var m map[string]string
			_ = json.Unmarshal([]byte(s), &m)
		}
	})
}
