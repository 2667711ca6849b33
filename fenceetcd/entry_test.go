package fenceetcd

import (
	"encoding/json"
	"testing"

	"github.com/fencing/fence"
)

// encodeEntry writes what json.Marshal writes for the same entry, so
// entries read the same whichever wrote them.
func TestEncodeEntryIsJSON(t *testing.T) {
	for _, req := range []fence.Request{
		{Owner: "a1b2"},
		{Owner: "job-\"x\"\\<y>", Meta: map[string]string{"host": "h", "pid": "1", "acquired_at": "2026-12-01T06:00:00Z"}},
		{Owner: "sem", Limit: 3, Meta: map[string]string{"é": "\x01\n"}},
		{Owner: "empty-meta", Meta: map[string]string{}},
	} {
		want, err := json.Marshal(entry{Owner: req.Owner, Meta: req.Meta, Limit: req.Limit})
		if err != nil {
			t.Fatal(err)
		}
		if got := encodeEntry(req); got != string(want) {
			t.Errorf("encodeEntry(%+v)\n got %s\nwant %s", req, got, want)
		}
	}
}
