package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// lines is a fence command in the background whose stdout is read line
// by line.
type lines struct {
	h     *holder
	lines chan string
}

func (e *env) startLines(args ...string) *lines {
	e.t.Helper()
	cmd := e.command(args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	l := &lines{h: &holder{cmd: cmd, done: make(chan struct{})}, lines: make(chan string, 1000)}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			l.lines <- sc.Text()
		}
		close(l.lines)
		cmd.Wait()
		close(l.h.done)
	}()
	e.t.Cleanup(func() {
		cmd.Process.Kill()
		<-l.h.done
	})
	return l
}

// next returns the next line, failing after 30s.
func (l *lines) next(t *testing.T) string {
	t.Helper()
	select {
	case s, ok := <-l.lines:
		if !ok {
			t.Fatal("fence ended its output")
		}
		return s
	case <-time.After(30 * time.Second):
		t.Fatal("no output within 30s")
	}
	return ""
}

// until reads lines until one matches, and returns the lines read.
func (l *lines) until(t *testing.T, match func(string) bool) []string {
	t.Helper()
	var seen []string
	for {
		s := l.next(t)
		seen = append(seen, s)
		if match(s) {
			return seen
		}
	}
}

// quiet reports whether no line comes within d.
func (l *lines) quiet(d time.Duration) (string, bool) {
	select {
	case s := <-l.lines:
		return s, false
	case <-time.After(d):
		return "", true
	}
}

// Without a terminal, list --watch prints a table when something changed,
// and nothing while nothing does.
func TestListWatchPrintsChanges(t *testing.T) {
	e := newEnv(t)
	w := e.startLines("list", "--watch", "--interval", "100ms")
	if s := w.next(t); !strings.Contains(s, "no keys held in "+e.store) {
		t.Fatalf("first line %q; want no keys held", s)
	}
	w.next(t) // the blank line that ends a listing
	if s, quiet := w.quiet(700 * time.Millisecond); !quiet {
		t.Errorf("printed %q though nothing changed", s)
	}

	h, started, open := e.gated("k")
	seen := w.until(t, func(s string) bool { return strings.HasPrefix(s, `"k"`) })
	if !strings.Contains(seen[0], "1 key held") {
		t.Errorf("heading %q", seen[0])
	}
	row := strings.Fields(seen[len(seen)-1])
	// KEY HOLDER HOST PID TOKEN HELD-FOR TIME-LEFT(until released) WAITERS
	if len(row) < 7 || row[3] != strconv.Itoa(h.cmd.Process.Pid) || row[4] != fmt.Sprint(num(started["token"])) ||
		!strings.Contains(seen[len(seen)-1], "until released") || row[len(row)-1] != "-" {
		t.Errorf("row %q; want pid %d, token %v, until released, waiters -", seen[len(seen)-1], h.cmd.Process.Pid, started["token"])
	}
	w.next(t)
	if s, quiet := w.quiet(700 * time.Millisecond); !quiet {
		t.Errorf("printed %q though only the time held changed", s)
	}

	open()
	h.wait(t)
	w.until(t, func(s string) bool { return strings.Contains(s, "no keys held") })
	w.h.cmd.Process.Signal(syscall.SIGTERM)
	if code := w.h.wait(t); code != 0 {
		t.Errorf("list --watch exited %d on SIGTERM, want 0", code)
	}
}

// list --watch --json: one object per refresh, "changed" when the keys
// or holders changed.
func TestListWatchJSON(t *testing.T) {
	e := newEnv(t)
	w := e.startLines("list", "--watch", "--json", "--interval", "100ms", "--prefix", "jobs/")
	decode := func(s string) watchJSON {
		t.Helper()
		var o watchJSON
		if err := json.Unmarshal([]byte(s), &o); err != nil {
			t.Fatalf("not a JSON object: %q", s)
		}
		return o
	}
	o := decode(w.next(t))
	if !o.Changed || o.Count == nil || *o.Count != 0 || o.Store != e.store || o.Prefix != "jobs/" || o.Time == "" {
		t.Errorf("first object %+v", o)
	}
	if o := decode(w.next(t)); o.Changed {
		t.Errorf("second object says changed though nothing did: %+v", o)
	}
	h, started, open := e.gated("jobs/a")
	e.start("run", "--json", "--key", "other", "--", "sleep", "30")
	var got watchJSON
	w.until(t, func(s string) bool { got = decode(s); return len(got.Keys) > 0 })
	if !got.Changed || len(got.Keys) != 1 || got.Keys[0].Key != "jobs/a" || got.Keys[0].PID != h.cmd.Process.Pid ||
		got.Keys[0].Token != num(started["token"]) || got.Keys[0].Waiters != nil {
		t.Errorf("object after a lease was taken: %+v", got)
	}
	if o := decode(w.next(t)); o.Changed || len(o.Keys) != 1 {
		t.Errorf("object with nothing changed: %+v", o)
	}
	open()
	h.wait(t)
	w.until(t, func(s string) bool { got = decode(s); return len(got.Keys) == 0 })
	if !got.Changed || *got.Count != 0 {
		t.Errorf("object after the release: %+v", got)
	}
	w.h.cmd.Process.Signal(syscall.SIGINT)
	if code := w.h.wait(t); code != 0 {
		t.Errorf("list --watch --json exited %d on SIGINT, want 0", code)
	}
}

// fence run --metrics-addr serves the library's metrics while CMD runs,
// and stops serving when fence exits.
func TestRunServesMetrics(t *testing.T) {
	e := newEnv(t)
	gate := filepath.Join(t.TempDir(), "gate")
	h := e.background("run", "--json", "--metrics-addr", "127.0.0.1:0", "--key", "k", "--", "sh", "-c",
		"while [ ! -e "+gate+" ]; do sleep 0.05; done")
	url, _ := h.expect(t, "metrics")["addr"].(string)
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("metrics event without an address: %q", url)
	}
	h.expect(t, "started")
	body := scrape(t, url)
	held := regexp.MustCompile(`(?m)^fence_leases_held\{[^}]*fence_store="file"[^}]*\} 1$`)
	if !held.MatchString(body) {
		t.Errorf("no fence_leases_held 1 while CMD runs; /metrics:\n%s", body)
	}
	if !regexp.MustCompile(`(?m)^fence_lease_age_seconds\{[^}]*\} [0-9.e+-]+$`).MatchString(body) {
		t.Errorf("no fence_lease_age_seconds while CMD runs; /metrics:\n%s", body)
	}
	if !strings.Contains(body, `fence_acquire_duration_seconds_count{`) || !strings.Contains(body, `outcome="acquired"`) {
		t.Errorf("no acquisition recorded; /metrics:\n%s", body)
	}
	os.WriteFile(gate, nil, 0o600)
	h.expect(t, "released")
	if code := h.wait(t); code != 0 {
		t.Fatalf("fence exited %d", code)
	}
	if _, err := http.Get(url); err == nil {
		t.Errorf("metrics still served after fence exited")
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 30 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
	return string(b)
}

// While fence run waits, /metrics shows it waiting.
func TestMetricsShowAWaitingRun(t *testing.T) {
	e := newEnv(t)
	h, _, open := e.gated("k")
	w := e.background("run", "--json", "--metrics-addr", "127.0.0.1:0", "--key", "k", "--", "true")
	url, _ := w.expect(t, "metrics")["addr"].(string)
	w.expect(t, "waiting")
	re := regexp.MustCompile(`(?m)^fence_acquire_waiting\{[^}]*\} 1$`)
	deadline := time.Now().Add(30 * time.Second)
	for body := scrape(t, url); !re.MatchString(body); body = scrape(t, url) {
		if time.Now().After(deadline) {
			t.Fatalf("no fence_acquire_waiting 1 while waiting; /metrics:\n%s", body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	open()
	h.wait(t)
	w.expect(t, "released")
	if code := w.wait(t); code != 0 {
		t.Errorf("fence exited %d", code)
	}
}
