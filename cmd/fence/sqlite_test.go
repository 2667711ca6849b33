package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence/fencesqlite"
)

// TestSQLiteStore runs fence against a database file through an
// sqlite:// store URL: tokens grow, a held key is skipped naming its
// holder, status and list tell the holder and the time left, and a lease
// deleted behind the holder's back stops the command with exit 76.
func TestSQLiteStore(t *testing.T) {
	db := filepath.Join(t.TempDir(), "fence.db")
	e := &env{t: t, home: t.TempDir(), store: "sqlite://" + db}

	var last int64
	for range 2 {
		r := e.run("run", "--key", "jobs/nightly", "--", "sh", "-c", "echo $FENCE_TOKEN")
		if tok := tokenOf(t, r); tok <= last {
			t.Fatalf("token %d after %d", tok, last)
		} else {
			last = tok
		}
	}

	h, started := e.start("run", "--json", "--ttl", "20s", "--key", "k", "--", "sleep", "60")
	e.start("run", "--json", "--key", "other", "--", "sleep", "60")
	r := e.run("run", "--no-wait", "--key", "k", "--", "true")
	if r.code != 75 || !strings.Contains(r.stderr, "pid "+strconv.Itoa(h.cmd.Process.Pid)) ||
		!strings.Contains(r.stderr, fmt.Sprintf("token %d", num(started["token"]))) {
		t.Errorf("run on a held key: exit %d, want 75 naming the holder; stderr:\n%s", r.code, r.stderr)
	}
	r = e.run("status", "--key", "k", "--json")
	var st holderJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 || !st.Held ||
		st.Token != num(started["token"]) || st.PID != h.cmd.Process.Pid || st.ExpiresInMS <= 0 || st.ExpiresInMS > 20000 {
		t.Errorf("status: exit %d, %q", r.code, r.stdout)
	}
	r = e.run("list", "--json")
	var all []holderJSON
	if err := json.Unmarshal([]byte(r.stdout), &all); err != nil || r.code != 0 || len(all) != 2 || all[0].Key != "k" || all[1].Key != "other" {
		t.Errorf("list --json: exit %d, %q", r.code, r.stdout)
	}
	if r := e.run("list", "--prefix", "oth"); r.code != 0 || !strings.Contains(r.stdout, `"other"`) || strings.Contains(r.stdout, `"k"`) {
		t.Errorf("list --prefix: exit %d, %q", r.code, r.stdout)
	}

	// An operator deletes the lease: the next renewal is refused, CMD is
	// stopped, fence exits 76.
	s, err := fencesqlite.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := s.DB().ExecContext(ctx, `UPDATE fence_locks SET owner = NULL WHERE key = 'k'`); err != nil {
		t.Fatal(err)
	}
	if ev := h.expect(t, "lost"); ev["reason"] != "refused" {
		t.Errorf("lost event = %v", ev)
	}
	if code := h.wait(t); code != 76 {
		t.Errorf("fence exited %d after its lease was deleted, want 76; it said:\n%s", code, h.stderr)
	}

	// A bad URL is a usage error.
	if r := e.run("status", "--store", "sqlite://elsewhere"+db, "--key", "k"); r.code != 2 || !strings.Contains(r.stderr, "this host only") {
		t.Errorf("status on another host's file: exit %d, stderr %q", r.code, r.stderr)
	}
}
