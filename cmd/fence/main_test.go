package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testkit/leakcheck"

	"github.com/fencing/fence/fencefile"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// fenceBin is the fence binary under test, built once by TestMain.
var fenceBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "fence-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fenceBin = filepath.Join(dir, "fence")
	build := exec.Command("go", "build", "-o", fenceBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building fence:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		return m.Run()
	}()
	if code == 0 {
		if err := leakcheck.Find(testserver.IgnoreLeaks()); err != nil {
			fmt.Fprintln(os.Stderr, "leakcheck:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// env is a private store and home for one test: never the user's own.
type env struct {
	t       *testing.T
	store   string
	home    string
	environ []string // more environment variables, "NAME=value"
	bin     string   // the program run in fence's place (a wrapper that execs it); fenceBin if empty
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return &env{t: t, store: privateDir(t), home: t.TempDir()}
}

// privateDir returns a new directory only its owner can list or enter, as
// a store's directory should be: t.TempDir's 0755 makes fence warn.
func privateDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// A store directory other users can list is used, with a warning: they
// can read key names from its file names. A private one gets none.
func TestOpenDirectoryWarns(t *testing.T) {
	e := newEnv(t)
	open := t.TempDir()
	if err := os.Chmod(open, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		store string
		warns bool
	}{{open, true}, {e.store, false}} {
		for _, asJSON := range []bool{false, true} {
			args := []string{"status", "--store", c.store, "--key", "k"}
			if asJSON {
				args = append(args, "--json")
			}
			r := e.run(args...)
			if r.code != exitFree {
				t.Fatalf("fence %q: exit %d; stderr %q", args, r.code, r.stderr)
			}
			warned := strings.Contains(r.stderr, "other users can list it") && strings.Contains(r.stderr, "chmod o-rx "+c.store)
			if warned != c.warns {
				t.Errorf("fence %q (directory %s): stderr %q; want a warning: %v", args, c.store, r.stderr, c.warns)
			}
			if asJSON && c.warns && !strings.Contains(r.stderr, `"event":"warning"`) {
				t.Errorf("fence %q: the warning is not a JSON event: %q", args, r.stderr)
			}
		}
	}
}

func (e *env) command(args ...string) *exec.Cmd {
	bin := fenceBin
	if e.bin != "" {
		bin = e.bin
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "FENCE_STORE="+e.store, "HOME="+e.home, "XDG_STATE_HOME=",
		// The machine's own Azure settings stay out.
		"AZURE_STORAGE_CONNECTION_STRING=", "AZURE_STORAGE_KEY=", "AZURE_STORAGE_SAS_TOKEN=")
	cmd.Env = append(cmd.Env, e.environ...)
	return cmd
}

type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// run runs fence to completion, within a generous deadline.
func (e *env) run(args ...string) result {
	e.t.Helper()
	cmd := e.command(args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		<-done
		e.t.Fatalf("fence %q did not finish in 60s; stderr:\n%s", args, errb.String())
	}
	return result{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errb.String(), took: time.Since(start)}
}

// holder is a "fence run --json" in the background.
type holder struct {
	cmd    *exec.Cmd
	events chan map[string]any
	stderr *bytes.Buffer
	done   chan struct{}
}

// start starts fence with --json in the background, and waits for its
// "started" event (CMD running under the lease).
func (e *env) start(args ...string) (*holder, map[string]any) {
	e.t.Helper()
	h := e.background(args...)
	return h, h.expect(e.t, "started")
}

// background starts fence with --json in the background; its events
// arrive on h.events.
func (e *env) background(args ...string) *holder {
	e.t.Helper()
	cmd := e.command(args...)
	pr, err := cmd.StderrPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	h := &holder{cmd: cmd, events: make(chan map[string]any, 100), stderr: &bytes.Buffer{}, done: make(chan struct{})}
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			h.stderr.WriteString(sc.Text() + "\n")
			var ev map[string]any
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				h.events <- ev
			}
		}
		close(h.events)
		cmd.Wait()
		close(h.done)
	}()
	e.t.Cleanup(func() {
		cmd.Process.Kill()
		<-h.done
	})
	return h
}

// expect waits for the next event of kind name, skipping others.
func (h *holder) expect(t *testing.T, name string) map[string]any {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-h.events:
			if !ok {
				t.Fatalf("fence ended before event %q; it said:\n%s", name, h.stderr)
			}
			if ev["event"] == name {
				return ev
			}
		case <-timeout:
			t.Fatalf("no event %q within 30s; fence said:\n%s", name, h.stderr)
		}
	}
}

// wait waits for the background fence to exit and returns its status.
func (h *holder) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-h.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("fence did not exit within 60s; it said:\n%s", h.stderr)
	}
	return h.cmd.ProcessState.ExitCode()
}

func num(v any) int64 {
	f, _ := v.(float64)
	return int64(f)
}

// gone reports whether pid no longer runs (or is a zombie nobody reaps).
func gone(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return syscall.Kill(pid, 0) == syscall.ESRCH
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && i+2 < len(s) && (s[i+2] == 'Z' || s[i+2] == 'X')
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitReady waits until a command has written "ready" to file: its
// signal traps are set.
func waitReady(t *testing.T, file string) {
	t.Helper()
	eventually(t, "command ready", func() bool {
		data, _ := os.ReadFile(file)
		return string(data) == "ready\n"
	})
}

func tokenOf(t *testing.T, r result) int64 {
	t.Helper()
	tok, err := strconv.ParseInt(strings.TrimSpace(r.stdout), 10, 64)
	if err != nil || r.code != 0 {
		t.Fatalf("exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	return tok
}

func TestHeldExits75AndNamesHolder(t *testing.T) {
	e := newEnv(t)
	h, started := e.start("run", "--json", "--key", "k", "--", "sleep", "30")
	r := e.run("run", "--no-wait", "--key", "k", "--", "true")
	if r.code != 75 {
		t.Fatalf("second run exited %d, want 75; stderr:\n%s", r.code, r.stderr)
	}
	pid := strconv.Itoa(h.cmd.Process.Pid)
	if !strings.Contains(r.stderr, "pid "+pid) || !strings.Contains(r.stderr, fmt.Sprintf("token %d", num(started["token"]))) {
		t.Errorf("message does not name the holder (pid %s, token %v): %s", pid, started["token"], r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("fence wrote to stdout: %q", r.stdout)
	}

	// --wait runs out the same way; --json says it as an event.
	r = e.run("run", "--wait", "300ms", "--json", "--key", "k", "--", "true")
	if r.code != 75 {
		t.Fatalf("run --wait 300ms exited %d, want 75; stderr:\n%s", r.code, r.stderr)
	}
	var last map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		if err := json.Unmarshal([]byte(line), &last); err != nil {
			t.Fatalf("not a JSON line: %q", line)
		}
	}
	holder, _ := last["holder"].(map[string]any)
	if last["event"] != "held" || holder == nil || num(holder["pid"]) != int64(h.cmd.Process.Pid) {
		t.Errorf("last event = %v, want held by pid %s", last, pid)
	}
}

func TestTokenGrowsAndEnvironment(t *testing.T) {
	e := newEnv(t)
	var last int64
	for range 3 {
		tok := tokenOf(t, e.run("run", "--key", "job/x", "--", "sh", "-c", "echo $FENCE_TOKEN"))
		if tok <= last {
			t.Fatalf("token %d after %d", tok, last)
		}
		last = tok
	}
	r := e.run("run", "--key", "job/x", "--", "sh", "-c", `echo "$FENCE_KEY|$FENCE_OWNER"`)
	key, owner, _ := strings.Cut(strings.TrimSpace(r.stdout), "|")
	if key != "job/x" || len(owner) < 32 {
		t.Errorf("FENCE_KEY=%q FENCE_OWNER=%q", key, owner)
	}
	// The lock file does not leak into CMD.
	r = e.run("run", "--key", "job/x", "--", "sh", "-c", "ls -l /proc/$$/fd")
	if r.code != 0 || strings.Contains(r.stdout, ".lock") || strings.Contains(r.stdout, e.store) {
		t.Errorf("CMD inherited a lock file (exit %d):\n%s", r.code, r.stdout)
	}
}

// kill -9 of a holding fence run: its command dies too (parent-death
// signal), and the next run gets the key at once with a higher token.
func TestKill9TakesCommandAlong(t *testing.T) {
	e := newEnv(t)
	h, started := e.start("run", "--json", "--key", "k", "--", "sleep", "60")
	child := int(num(started["pid"]))
	if gone(child) {
		t.Fatalf("child pid %d not running", child)
	}
	if err := h.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	h.wait(t)
	eventually(t, fmt.Sprintf("command (pid %d) gone after kill -9 of fence", child), func() bool { return gone(child) })
	r := e.run("run", "--no-wait", "--key", "k", "--", "sh", "-c", "echo $FENCE_TOKEN")
	if tok := tokenOf(t, r); tok <= num(started["token"]) {
		t.Errorf("token after kill -9 = %d, want > %v", tok, started["token"])
	}
	if r.took > 10*time.Second {
		t.Errorf("acquiring after kill -9 took %v", r.took)
	}
}

func TestStatusAndList(t *testing.T) {
	e := newEnv(t)
	r := e.run("status", "--key", "k", "--json")
	if r.code != 3 || strings.TrimSpace(r.stdout) != `{"key":"k","held":false}` {
		t.Errorf("status of a free key: exit %d, %q", r.code, r.stdout)
	}
	if r := e.run("status", "--key", "k"); r.code != 3 || r.stdout != "\"k\": free\n" {
		t.Errorf("status of a free key: exit %d, %q", r.code, r.stdout)
	}
	h, started := e.start("run", "--json", "--key", "k", "--", "sleep", "30")
	e.start("run", "--json", "--key", "other", "--", "sleep", "30")

	r = e.run("status", "--key", "k", "--json")
	var st holderJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 {
		t.Fatalf("status: exit %d, %q, %v", r.code, r.stdout, err)
	}
	if !st.Held || st.Key != "k" || st.Token != num(started["token"]) || st.PID != h.cmd.Process.Pid ||
		st.Owner == "" || st.Host == "" || st.AcquiredAt == "" || st.ExpiresInMS != 0 {
		t.Errorf("status = %+v", st)
	}
	r = e.run("status", "--key", "k")
	if r.code != 0 || !strings.Contains(r.stdout, "held by "+st.Owner) || !strings.Contains(r.stdout, "until released") {
		t.Errorf("status text: exit %d, %q", r.code, r.stdout)
	}

	r = e.run("list", "--json")
	var all []holderJSON
	if err := json.Unmarshal([]byte(r.stdout), &all); err != nil || r.code != 0 || len(all) != 2 || all[0].Key != "k" || all[1].Key != "other" {
		t.Errorf("list --json: exit %d, %q", r.code, r.stdout)
	}
	r = e.run("list", "--prefix", "oth")
	if r.code != 0 || !strings.Contains(r.stdout, `"other"`) || strings.Contains(r.stdout, `"k"`) {
		t.Errorf("list --prefix: exit %d, %q", r.code, r.stdout)
	}
	if r := e.run("list", "--prefix", "none", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("empty list --json = %q, want []", r.stdout)
	}
}

// A lost lease: CMD gets SIGTERM, fence exits 76.
func TestLostLeaseStopsCommand(t *testing.T) {
	e := newEnv(t)
	out := filepath.Join(t.TempDir(), "out")
	h, _ := e.start("run", "--json", "--ttl", "300ms", "--key", "k", "--", "sh", "-c",
		`trap 'echo got-term > `+out+`; exit 0' TERM; echo ready > `+out+`; while :; do sleep 0.05; done`)
	waitReady(t, out)
	s, err := fencefile.New(e.store)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("k"); err != nil {
		t.Fatal(err)
	}
	ev := h.expect(t, "lost")
	if ev["reason"] != "refused" {
		t.Errorf("lost event = %v", ev)
	}
	if code := h.wait(t); code != 76 {
		t.Errorf("fence exited %d after losing the lease, want 76; it said:\n%s", code, h.stderr)
	}
	if data, _ := os.ReadFile(out); string(data) != "got-term\n" {
		t.Errorf("CMD did not get SIGTERM (wrote %q)", data)
	}
}

// A lease lost where only the release finds it out (the lock file
// deleted while CMD runs; the next renewal is 20s away) ends in exit 76,
// not in CMD's status: CMD's work may have overlapped another holder's.
func TestLossFoundAtReleaseExits76(t *testing.T) {
	for _, asJSON := range []bool{false, true} {
		e := newEnv(t)
		dir := t.TempDir()
		ready, goOn := filepath.Join(dir, "ready"), filepath.Join(dir, "go")
		args := []string{"run", "--ttl", "60s", "--key", "k", "--", "sh", "-c",
			`echo ready > ` + ready + `; while [ ! -e ` + goOn + ` ]; do sleep 0.05; done`}
		if asJSON {
			args = slices.Insert(args, 1, "--json")
		}
		done := make(chan result, 1)
		go func() { done <- e.run(args...) }()
		waitReady(t, ready)
		s, err := fencefile.New(e.store)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(s.Path("k")); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(goOn, nil, 0o600)
		r := <-done
		if r.code != 76 {
			t.Errorf("json %v: fence exited %d, want 76; it said:\n%s", asJSON, r.code, r.stderr)
		}
		if !asJSON {
			if !strings.Contains(r.stderr, "lost") || !strings.Contains(r.stderr, "found when releasing it") {
				t.Errorf("the loss is not reported clearly:\n%s", r.stderr)
			}
			continue
		}
		var events []string
		var lost map[string]any
		for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
			var ev map[string]any
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				t.Fatalf("not a JSON line: %q", line)
			}
			events = append(events, ev["event"].(string))
			if ev["event"] == "lost" {
				lost = ev
			}
		}
		if !slices.Equal(events, []string{"acquired", "started", "exited", "lost"}) || lost["reason"] != "refused" {
			t.Errorf("events %v, lost event %v; want acquired, started, exited, lost (refused)", events, lost)
		}
	}
}

// A lease lost during --hold-at-least, after CMD succeeded, ends in 76.
func TestLossDuringHoldExits76(t *testing.T) {
	e := newEnv(t)
	h := e.background("run", "--json", "--ttl", "3s", "--hold-at-least", "60s", "--key", "k", "--", "true")
	h.expect(t, "holding")
	s, _ := fencefile.New(e.store)
	if err := s.Delete("k"); err != nil {
		t.Fatal(err)
	}
	if ev := h.expect(t, "lost"); ev["reason"] != "refused" || !strings.Contains(ev["message"].(string), "--hold-at-least") {
		t.Errorf("lost event %v", ev)
	}
	if code := h.wait(t); code != 76 {
		t.Errorf("fence exited %d, want 76; it said:\n%s", code, h.stderr)
	}
}

// A command that ignores SIGTERM is killed after the grace period.
func TestLostLeaseGraceThenKill(t *testing.T) {
	e := newEnv(t)
	out := filepath.Join(t.TempDir(), "out")
	h, started := e.start("run", "--json", "--ttl", "300ms", "--grace", "500ms", "--key", "k", "--",
		"sh", "-c", `trap '' TERM; echo ready > `+out+`; sleep 60`)
	waitReady(t, out)
	s, _ := fencefile.New(e.store)
	if err := s.Delete("k"); err != nil {
		t.Fatal(err)
	}
	h.expect(t, "lost")
	h.expect(t, "kill")
	if code := h.wait(t); code != 76 {
		t.Errorf("fence exited %d, want 76", code)
	}
	if child := int(num(started["pid"])); !gone(child) {
		t.Errorf("command pid %d still running", child)
	}
}

func TestSignalForwarded(t *testing.T) {
	e := newEnv(t)
	out := filepath.Join(t.TempDir(), "out")
	h, _ := e.start("run", "--json", "--key", "k", "--", "sh", "-c",
		`trap 'echo got-term > `+out+`; exit 7' TERM; echo ready > `+out+`; while :; do sleep 0.05; done`)
	waitReady(t, out)
	h.cmd.Process.Signal(syscall.SIGTERM)
	if code := h.wait(t); code != 7 {
		t.Errorf("fence exited %d, want the command's 7; it said:\n%s", code, h.stderr)
	}
	if data, _ := os.ReadFile(out); string(data) != "got-term\n" {
		t.Errorf("CMD did not get SIGTERM (wrote %q)", data)
	}
	if r := e.run("status", "--key", "k"); r.code != 3 {
		t.Errorf("key not released after the command ended: %s", r.stdout)
	}

	// A command that dies of the signal: 128+15.
	h, _ = e.start("run", "--json", "--key", "k", "--", "sleep", "30")
	h.cmd.Process.Signal(syscall.SIGTERM)
	if code := h.wait(t); code != 128+15 {
		t.Errorf("fence exited %d, want 143", code)
	}
}

func TestExitStatusPassthrough(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		argv []string
		want int
	}{
		{[]string{"true"}, 0},
		{[]string{"sh", "-c", "exit 3"}, 3},
		{[]string{"sh", "-c", "exit 75"}, 75},
		{[]string{"sh", "-c", "kill -KILL $$"}, 128 + 9},
		{[]string{"no-such-command-fence-test"}, 127},
		{[]string{e.store}, 126},
	} {
		r := e.run(append([]string{"run", "--key", "k", "--"}, c.argv...)...)
		if r.code != c.want {
			t.Errorf("fence run -- %q: exit %d, want %d; stderr: %s", c.argv, r.code, c.want, r.stderr)
		}
	}
	if r := e.run("run", "--key", "k", "--", "sh", "-c", "echo out; echo err >&2"); r.stdout != "out\n" || r.stderr != "err\n" {
		t.Errorf("CMD's output: stdout %q, stderr %q", r.stdout, r.stderr)
	}
}

func TestHoldAtLeast(t *testing.T) {
	e := newEnv(t)
	done := make(chan result, 1)
	go func() { done <- e.run("run", "--hold-at-least", "2s", "--key", "k", "--", "true") }()
	eventually(t, "key held", func() bool { return e.run("status", "--key", "k").code == 0 })
	if r := e.run("run", "--no-wait", "--key", "k", "--", "true"); r.code != 75 {
		t.Errorf("run during the hold: exit %d, want 75", r.code)
	}
	r := <-done
	if r.code != 0 || r.took < 2*time.Second {
		t.Errorf("run --hold-at-least 2s: exit %d after %v", r.code, r.took)
	}
	if r := e.run("status", "--key", "k"); r.code != 3 {
		t.Errorf("key still held after the hold: %s", r.stdout)
	}
}

func TestUsageErrors(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "Usage:"},
		{[]string{"frobnicate"}, "unknown command"},
		{[]string{"run", "--", "true"}, "--key is required"},
		{[]string{"run", "--key", "k"}, "no command"},
		{[]string{"run", "--key", "k", "--ttl", "soon", "--", "true"}, "invalid value"},
		{[]string{"run", "--key", "k", "--ttl", "-1s", "--", "true"}, "must be positive"},
		{[]string{"run", "--key", "k", "--ttl", "1ms", "--", "true"}, "ttl"},
		{[]string{"run", "--key", "k", "--wait", "1s", "--no-wait", "--", "true"}, "exclude"},
		{[]string{"run", "--key", "k", "--bogus", "--", "true"}, "not defined"},
		{[]string{"run", "--store", "bogus://x", "--key", "k", "--", "true"}, "file:///dir"},
		{[]string{"status"}, "--key is required"},
		{[]string{"status", "--store", "file://elsewhere/x", "--key", "k"}, "this host only"},
		{[]string{"list", "extra"}, "unexpected"},
	} {
		r := e.run(c.args...)
		if r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("fence %q: exit %d, stderr %q; want exit 2 and %q", c.args, r.code, r.stderr, c.want)
		}
	}
	if r := e.run("help"); r.code != 0 || !strings.Contains(r.stdout, "76") {
		t.Errorf("fence help: exit %d, %q", r.code, r.stdout)
	}
	// Credentials never show.
	r := e.run("run", "--store", "bogus://user:hunter2@host", "--key", "k", "--", "true")
	if strings.Contains(r.stderr, "hunter2") {
		t.Errorf("password printed: %s", r.stderr)
	}
}

// Without --store or FENCE_STORE, fence uses $XDG_STATE_HOME/fence.
func TestDefaultStore(t *testing.T) {
	e := newEnv(t)
	state := t.TempDir()
	cmd := exec.Command(fenceBin, "run", "--key", "k", "--", "true")
	cmd.Env = append(os.Environ(), "FENCE_STORE=", "HOME="+e.home, "XDG_STATE_HOME="+state)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	entries, err := os.ReadDir(filepath.Join(state, "fence"))
	if err != nil || len(entries) != 1 {
		t.Errorf("default store dir: %v, %v", entries, err)
	}
}
