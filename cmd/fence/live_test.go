package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/fencing/fence"
)

func TestLiveLine(t *testing.T) {
	now := time.Now()
	v := &waitView{key: "k", start: now.Add(-75 * time.Second), st: &store{raw: "redis://u:pw@h"}}
	h := &fence.Holder{Key: "k", Owner: "web-0123456789abcdef0123456789abcdef", Token: 17, ExpiresIn: 20 * time.Second,
		Meta: map[string]string{"host": "web1", "pid": "4242", "acquired_at": now.Add(-3 * time.Minute).Format(time.RFC3339Nano)}}
	for _, c := range []struct {
		s     snapshot
		limit time.Duration
		want  string
	}{
		{snapshot{holder: h, at: now.Add(-5 * time.Second)}, 0,
			`fence: waiting 1m15s for "k": held by web-01234567… (web1, pid 4242, token 17, held 3m00s, 15s left)`},
		{snapshot{holder: h, at: now.Add(-time.Minute)}, 2 * time.Minute,
			`fence: waiting 1m15s of 2m00s for "k": held by web-01234567… (web1, pid 4242, token 17, held 3m00s, 0.0s left)`},
		{snapshot{err: fence.ErrNotHeld, at: now}, 0, `fence: waiting 1m15s for "k": free now, taking it…`},
		{snapshot{err: fence.ErrUnsupported, at: now}, 0, `fence: waiting 1m15s for "k": held (this store cannot tell by whom)`},
		{snapshot{err: errors.New("fence: dial tcp 127.0.0.1:6379: i/o timeout"), at: now}, 0,
			`fence: waiting 1m15s for "k": held; cannot tell by whom: dial tcp 127.0.0.1:6379: i/o timeout`},
	} {
		v.last, v.limit = c.s, c.limit
		if got := v.line(now); got != c.want {
			t.Errorf("line =\n  %s\nwant\n  %s", got, c.want)
		}
	}
}

func TestTruncateAndShort(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{{"hello", 10, "hello"}, {"hello", 5, "hello"}, {"hello", 4, "hel…"}, {"héllo wörld", 6, "héllo…"}, {"x", 0, "x"}, {"xy", 0, "…"}} {
		if got := truncate(c.s, c.n); got != c.want {
			t.Errorf("truncate(%q, %d) = %q; want %q", c.s, c.n, got, c.want)
		}
	}
	for d, want := range map[time.Duration]string{-time.Second: "0.0s", 420 * time.Millisecond: "0.4s",
		42 * time.Second: "42s", 187 * time.Second: "3m07s", 125 * time.Minute: "2h05m"} {
		if got := short(d); got != want {
			t.Errorf("short(%v) = %q; want %q", d, got, want)
		}
	}
	for owner, want := range map[string]string{"0123456789abcdef0123456789abcdef": "01234567…",
		"w-3-0123456789abcdef0123456789abcdef": "w-3-01234567…", "": "", "short": "short"} {
		if got := shortOwner(owner); got != want {
			t.Errorf("shortOwner(%q) = %q; want %q", owner, got, want)
		}
	}
}

// The library's warnings reach the user, as text or as JSON events; its
// loss line does not ("fence run" reports a loss itself).
func TestLibraryWarnings(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		var buf bytes.Buffer
		log := slog.New(&logHandler{ev: &events{w: &buf, json: asJSON, key: "k"}})
		log.Warn("fence: renewal failed; retrying", "key", "k", "token", 3, "valid_for", 2*time.Second, "err", errors.New("timeout"))
		log.Error("fence: lease lost", "key", "k", "reason", "refused")
		log.Info("fence: chatter")
		out := buf.String()
		if asJSON {
			var ev event
			if err := json.Unmarshal([]byte(out), &ev); err != nil {
				t.Fatalf("not one JSON event: %q", out)
			}
			if ev.Event != "warning" || ev.Level != "WARN" || ev.Key != "k" || ev.Attrs["token"] != "3" || ev.Attrs["err"] != "timeout" {
				t.Errorf("warning event %+v", ev)
			}
			continue
		}
		want := "fence: renewal failed; retrying (token=3 valid_for=2s err=timeout)\n"
		if out != want {
			t.Errorf("text = %q; want %q", out, want)
		}
	}
}
