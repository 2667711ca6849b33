package metajson

import "testing"

func BenchmarkEncode(b *testing.B) {
	m := map[string]string{"host": "build-worker-17.example.internal", "pid": "123456", "acquired_at": "2026-12-01T06:07:08.123456789Z"}
	b.ReportAllocs()
	for b.Loop() {
		_ = Encode(m)
	}
}
