package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// fence break: a stale token changes nothing (exit 75), the holder's
// token breaks the lease (exit 0): its fence run loses it (exit 76), and
// the next holder's token is greater; a free key exits 3; --force breaks
// whoever holds it; neither --token nor --force is a usage error.
func TestBreak(t *testing.T) {
	e := newEnv(t)
	h, started := e.start("run", "--json", "--ttl", "3s", "--key", "k", "--", "sleep", "30")
	tok := num(started["token"])

	for _, args := range [][]string{
		{"break", "--key", "k"},
		{"break", "--key", "k", "--token", "1", "--force"},
		{"break", "--key", "k", "--token", "0"},
		{"break", "--token", "1"},
	} {
		if r := e.run(args...); r.code != 2 {
			t.Errorf("fence %q exited %d, want 2; stderr:\n%s", args, r.code, r.stderr)
		}
	}
	r := e.run("break", "--key", "k", "--token", fmt.Sprint(tok-1))
	if r.code != 75 || !strings.Contains(r.stdout, fmt.Sprintf("token %d", tok)) || !strings.Contains(r.stdout, "nothing broken") {
		t.Errorf("break with a stale token: exit %d, want 75 naming token %d; stdout:\n%s\nstderr:\n%s", r.code, tok, r.stdout, r.stderr)
	}
	if r := e.run("status", "--key", "k"); r.code != 0 {
		t.Errorf("status after a break with a stale token: exit %d, want 0 (held)", r.code)
	}

	r = e.run("break", "--json", "--key", "k", "--token", fmt.Sprint(tok))
	var out struct {
		Broken bool `json:"broken"`
		Holder struct {
			Token int64  `json:"token"`
			Owner string `json:"owner"`
		} `json:"holder"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); r.code != 0 || err != nil || !out.Broken ||
		out.Holder.Token != tok || out.Holder.Owner == "" {
		t.Errorf("break with the holder's token: exit %d, stdout %q (%v); want 0, broken, token %d, the owner; stderr:\n%s",
			r.code, r.stdout, err, tok, r.stderr)
	}
	h.expect(t, "lost")
	if code := h.wait(t); code != 76 {
		t.Errorf("the broken holder's fence run exited %d, want 76; it said:\n%s", code, h.stderr)
	}
	if next := tokenOf(t, e.run("run", "--key", "k", "--", "sh", "-c", "echo $FENCE_TOKEN")); next <= tok {
		t.Errorf("token after the break %d, not greater than the broken %d", next, tok)
	}

	if r := e.run("break", "--key", "k", "--token", fmt.Sprint(tok)); r.code != 3 || !strings.Contains(r.stdout, "free") {
		t.Errorf("break of a free key: exit %d, want 3; stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	h, started = e.start("run", "--json", "--ttl", "3s", "--key", "k", "--", "sleep", "30")
	r = e.run("break", "--key", "k", "--force")
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf("token %d", num(started["token"]))) {
		t.Errorf("break --force: exit %d, want 0 naming token %d; stdout:\n%s\nstderr:\n%s", r.code, num(started["token"]), r.stdout, r.stderr)
	}
	if code := h.wait(t); code != 76 {
		t.Errorf("the holder broken by --force exited %d, want 76", code)
	}
}
