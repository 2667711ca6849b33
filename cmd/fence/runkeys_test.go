package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testkit/testserver"
)

// fence run --keys takes every key or none, and tells CMD each token.
func TestRunKeysAllOrNone(t *testing.T) {
	e := newEnv(t)
	r := e.run("run", "--keys", "b,a", "--", "sh", "-c", `echo "$FENCE_KEYS|$FENCE_TOKENS|$FENCE_OWNERS"`)
	if r.code != exitOK {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	parts := strings.Split(strings.TrimSpace(r.stdout), "|")
	if len(parts) != 3 || parts[0] != "a,b" || !strings.HasPrefix(parts[1], "a=") || !strings.Contains(parts[1], ",b=") ||
		!strings.HasPrefix(parts[2], "a=") || !strings.Contains(parts[2], ",b=") {
		t.Fatalf("FENCE_KEYS|FENCE_TOKENS|FENCE_OWNERS = %q", r.stdout)
	}

	h, started := e.start("run", "--json", "--key", "b", "--", "sleep", "30")
	_ = started
	r = e.run("run", "--no-wait", "--keys", "a,b,c", "--", "true")
	if r.code != exitHeld || !strings.Contains(r.stderr, `key "b" is held`) {
		t.Fatalf("with b held: exit %d; want %d, naming b; stderr:\n%s", r.code, exitHeld, r.stderr)
	}
	for _, k := range []string{"a", "c"} {
		if r := e.run("run", "--no-wait", "--key", k, "--", "true"); r.code != exitOK {
			t.Errorf("%q left held by a refused --keys run: exit %d; stderr:\n%s", k, r.code, r.stderr)
		}
	}
	// Waiting, it gets them all once b is free.
	w := e.background("run", "--json", "--keys", "a,b,c", "--", "true")
	w.expect(t, "waiting")
	h.cmd.Process.Signal(syscall.SIGTERM)
	ev := w.expect(t, "started")
	if toks, _ := ev["tokens"].(map[string]any); len(toks) != 3 {
		t.Errorf("started event tokens = %v; want one per key", ev["tokens"])
	}
	if code := w.wait(t); code != exitOK {
		t.Errorf("waiting --keys run: exit %d; stderr:\n%s", code, w.stderr)
	}
}

func TestRunKeysUsage(t *testing.T) {
	e := newEnv(t)
	for _, args := range [][]string{
		{"run", "--key", "a", "--keys", "b,c", "--", "true"},
		{"run", "--keys", "a,b,a", "--", "true"},
		{"run", "--keys", "a,,b", "--", "true"},
		{"run", "--key", "a", "--lock-delay", "-1s", "--", "true"},
	} {
		if r := e.run(args...); r.code != exitUsage {
			t.Errorf("fence %q: exit %d; want %d; stderr:\n%s", args, r.code, exitUsage, r.stderr)
		}
	}
	// The file store keeps no lock-delay: refused, not ignored.
	if r := e.run("run", "--key", "a", "--lock-delay", "5s", "--", "true"); r.code != exitError || !strings.Contains(r.stderr, "lock-delay") {
		t.Errorf("--lock-delay on the file store: exit %d; stderr:\n%s", r.code, r.stderr)
	}
}

// A fence run killed with SIGKILL under --lock-delay leaves its keys
// blocked for the delay after its lease ends, and no longer.
func TestRunLockDelay(t *testing.T) {
	store := "redis://" + testserver.Redis(t).Addr()
	e := newEnv(t)
	h, _ := e.start("run", "--json", "--store", store, "--keys", "a,b", "--ttl", "1s", "--lock-delay", "4s", "--", "sleep", "60")
	killed := time.Now()
	h.cmd.Process.Kill()
	<-h.done
	time.Sleep(time.Until(killed.Add(2500 * time.Millisecond))) // past the TTL, within the delay
	if r := e.run("run", "--store", store, "--no-wait", "--key", "b", "--", "true"); r.code != exitHeld {
		t.Fatalf("within the lock-delay: exit %d; want %d; stderr:\n%s", r.code, exitHeld, r.stderr)
	}
	r := e.run("run", "--store", store, "--wait", "20s", "--key", "a", "--", "true")
	if took := time.Since(killed); r.code != exitOK || took < 4*time.Second || took > 10*time.Second {
		t.Errorf("after the lock-delay: exit %d %v after the kill; want 0 after 4s to 5s (TTL and delay); stderr:\n%s", r.code, took, r.stderr)
	}
}

// A signal that ends the wait, before CMD ran, is reported once as an
// "interrupted" event naming the signal and what was awaited; fence exits
// 128+signal and CMD never runs. The same for --key and --keys.
func TestRunInterruptedWhileWaiting(t *testing.T) {
	e := newEnv(t)
	h, _ := e.start("run", "--json", "--key", "b", "--", "sleep", "30")
	defer h.cmd.Process.Signal(syscall.SIGTERM)
	marker := t.TempDir() + "/ran"
	for _, c := range []struct {
		sig  syscall.Signal
		args []string
		what string
	}{
		{syscall.SIGINT, []string{"--key", "b"}, `"b"`},
		{syscall.SIGTERM, []string{"--keys", "a,b"}, `["a" "b"]`},
	} {
		args := append([]string{"run", "--json"}, c.args...)
		w := e.background(append(args, "--", "touch", marker)...)
		w.expect(t, "waiting")
		w.cmd.Process.Signal(c.sig)
		ev := w.expect(t, "interrupted")
		want := fmt.Sprintf("%s while waiting for %s; not running the command", sigName(c.sig), c.what)
		if ev["signal"] != sigName(c.sig) || ev["message"] != want {
			t.Errorf("%v: interrupted event %v; want signal %q, message %q", c.args, ev, sigName(c.sig), want)
		}
		if code := w.wait(t); code != 128+int(c.sig) {
			t.Errorf("%v: exit %d after %v; want %d", c.args, code, c.sig, 128+int(c.sig))
		}
		if n := strings.Count(w.stderr.String(), `"interrupted"`); n != 1 {
			t.Errorf("%v: %d interrupted events; want 1; stderr:\n%s", c.args, n, w.stderr)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatalf("%v: the command ran after %v ended the wait", c.args, c.sig)
		}
	}
}
