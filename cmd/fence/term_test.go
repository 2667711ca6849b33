package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"
)

// terminal is fence running on a pseudo-terminal: stdin, stdout and
// stderr, as in an interactive shell. It records every byte written.
type terminal struct {
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer
	done chan struct{}
}

func (e *env) startTerminal(args ...string) *terminal {
	e.t.Helper()
	cmd := e.command(args...)
	cmd.Env = append(cmd.Env, "TERM=xterm")
	f, err := pty.StartWithSize(cmd, &pty.Winsize{Cols: 120, Rows: 20})
	if err != nil {
		e.t.Fatal(err)
	}
	term := &terminal{cmd: cmd, done: make(chan struct{})}
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := f.Read(buf)
			term.mu.Lock()
			term.out.Write(buf[:n])
			term.mu.Unlock()
			if err != nil { // EIO once every process has closed the terminal
				break
			}
		}
		cmd.Wait()
		f.Close()
		close(term.done)
	}()
	e.t.Cleanup(func() {
		cmd.Process.Kill()
		<-term.done
	})
	return term
}

func (term *terminal) output() string {
	term.mu.Lock()
	defer term.mu.Unlock()
	return term.out.String()
}

func (term *terminal) eventually(t *testing.T, what string, cond func(out string) bool) string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out := term.output()
		if cond(out) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s; the terminal shows:\n%q", what, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (term *terminal) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-term.done:
	case <-time.After(60 * time.Second):
		t.Fatalf("fence did not exit within 60s; the terminal shows:\n%q", term.output())
	}
	return term.cmd.ProcessState.ExitCode()
}

// ranAfter reports whether out shows the command's "RAN token=N" line
// with N above the previous holder's token prev. Tokens are greater, not
// consecutive: the file store takes max(previous+1, the clock in µs). A
// number cut short by a partial read is below prev, never above.
func ranAfter(out string, prev int64) bool {
	m := ranToken.FindStringSubmatch(out)
	if m == nil {
		return false
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	return err == nil && n > prev
}

var ranToken = regexp.MustCompile(`RAN token=(\d+)`)

// gated starts a holder of key whose command runs until the returned
// function is called.
func (e *env) gated(key string) (*holder, map[string]any, func()) {
	e.t.Helper()
	gate := filepath.Join(e.t.TempDir(), "gate")
	h, started := e.start("run", "--json", "--key", key, "--", "sh", "-c",
		"while [ ! -e "+gate+" ]; do sleep 0.05; done")
	return h, started, func() {
		if err := os.WriteFile(gate, nil, 0o600); err != nil {
			e.t.Fatal(err)
		}
	}
}

// On a terminal, a waiting "fence run" keeps one status line up to date
// in place, says who holds the key, and erases the line when it gets the
// key and runs the command.
func TestWaitShowsLiveStatusOnTerminal(t *testing.T) {
	e := newEnv(t)
	h, started, open := e.gated("k")
	term := e.startTerminal("run", "--key", "k", "--", "sh", "-c", "echo RAN token=$FENCE_TOKEN")

	out := term.eventually(t, "three redraws of the status line", func(out string) bool {
		return strings.Count(out, "fence: waiting") >= 3
	})
	draws := strings.Split(out, "\r")
	line := ""
	for _, d := range draws {
		if strings.HasPrefix(d, "fence: waiting") {
			line = d
		}
	}
	for _, want := range []string{`for "k"`, "held by", fmt.Sprintf("pid %d", h.cmd.Process.Pid),
		fmt.Sprintf("token %d", num(started["token"])), "until released"} {
		if !strings.Contains(line, want) {
			t.Errorf("status line %q lacks %q", line, want)
		}
	}
	if !strings.HasSuffix(line, eraseLine) {
		t.Errorf("status line %q does not erase what a longer one left", line)
	}
	if strings.Contains(out, "\n") {
		t.Errorf("the status line is not redrawn in place: new lines in %q", out)
	}
	if len(line) > 120 {
		t.Errorf("status line is %d bytes on a 120-column terminal: %q", len(line), line)
	}

	open()
	out = term.eventually(t, "the command's output", func(out string) bool { return ranAfter(out, num(started["token"])) })
	before := out[:strings.Index(out, "RAN token=")]
	if last := strings.LastIndex(before, "fence: waiting"); !strings.Contains(before[last:], "\r"+eraseLine) {
		t.Errorf("the status line was not erased before the command ran: %q", before[last:])
	}
	if code := term.wait(t); code != 0 {
		t.Errorf("fence exited %d; the terminal shows:\n%q", code, term.output())
	}
	h.wait(t)
}

// Without a terminal, a waiting "fence run" says so in one plain line,
// with no escape sequences.
func TestWaitWithoutTerminalIsPlain(t *testing.T) {
	e := newEnv(t)
	h, started, open := e.gated("k")
	done := make(chan result, 1)
	go func() { done <- e.run("run", "--key", "k", "--", "true") }()
	time.Sleep(2500 * time.Millisecond) // a few status polls
	open()
	r := <-done
	if r.code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], `fence: waiting for "k", held by `) ||
		!strings.Contains(lines[0], fmt.Sprintf("pid %d, token %d", h.cmd.Process.Pid, num(started["token"]))) {
		t.Errorf("stderr without a terminal = %q; want one waiting line naming the holder", r.stderr)
	}
	if strings.Contains(r.stderr, "\x1b") || strings.Contains(r.stderr, "\r") {
		t.Errorf("escape sequences without a terminal: %q", r.stderr)
	}
	h.wait(t)
}

// tmux runs fence in a real terminal emulator, so the test reads the
// screen a person would see.
type tmux struct {
	t      *testing.T
	sock   string
	status string // file the exit status is written to
}

// quote quotes s for sh.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func newTmux(t *testing.T, e *env, cmdline ...string) *tmux {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		// As internal/testkit/testserver.Unavailable, which this package cannot
		// import outside Linux.
		if v := strings.ToLower(os.Getenv("FENCE_TEST_STRICT")); v == "1" || v == "true" || v == "yes" {
			t.Fatal("tmux is not installed (Debian package tmux; scripts/test installs it) (FENCE_TEST_STRICT=1: a missing program fails the test)")
		}
		t.Skip("tmux is not installed (Debian package tmux; scripts/test installs it) (set FENCE_TEST_STRICT=1 to make this a failure)")
	}
	dir := t.TempDir()
	x := &tmux{t: t, sock: filepath.Join(dir, "tmux.sock"), status: filepath.Join(dir, "status")}
	// The shell around fence records its exit status (tmux's own
	// #{pane_dead_status} is not always filled in) and survives the
	// Ctrl-C meant for fence.
	var sh strings.Builder
	sh.WriteString("trap : INT; env FENCE_STORE=" + quote(e.store) + " HOME=" + quote(e.home) + " XDG_STATE_HOME=")
	for _, a := range cmdline {
		sh.WriteString(" " + quote(a))
	}
	sh.WriteString("; echo $? > " + quote(x.status))
	x.cmd("-f", "/dev/null", "new-session", "-d", "-s", "fence", "-x", "100", "-y", "15", sh.String(),
		";", "set-option", "-t", "fence", "remain-on-exit", "on")
	t.Cleanup(func() { exec.Command("tmux", "-S", x.sock, "kill-server").Run() })
	return x
}

func (x *tmux) cmd(args ...string) string {
	x.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-S", x.sock}, args...)...).CombinedOutput()
	if err != nil {
		x.t.Fatalf("tmux %q: %v: %s", args, err, out)
	}
	return string(out)
}

// screen returns the visible screen, without trailing blank lines.
func (x *tmux) screen() string {
	return strings.TrimRight(x.cmd("capture-pane", "-p", "-S", "-50", "-t", "fence"), "\n")
}

func (x *tmux) eventually(what string, cond func(screen string) bool) string {
	x.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := x.screen()
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			x.t.Fatalf("%s: not within 30s; the screen shows:\n%s", what, s)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exited waits for fence to exit and returns its status.
func (x *tmux) exited() int {
	x.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		data, err := os.ReadFile(x.status)
		if code, cerr := strconv.Atoi(strings.TrimSpace(string(data))); err == nil && cerr == nil {
			return code
		}
		if time.Now().After(deadline) {
			x.t.Fatalf("fence still runs after 30s; the screen shows:\n%s", x.screen())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestTmuxRunWaitsThenRuns(t *testing.T) {
	e := newEnv(t)
	h, started, open := e.gated("k")
	x := newTmux(t, e, fenceBin, "run", "--key", "k", "--", "sh", "-c", "echo RAN token=$FENCE_TOKEN")
	screen := x.eventually("the status line", func(s string) bool { return strings.Contains(s, "held by") })
	time.Sleep(1500 * time.Millisecond) // a few redraws
	screen = x.screen()
	if n := strings.Count(screen, "fence: waiting"); n != 1 || strings.Count(screen, "\n") != 0 {
		t.Errorf("want exactly one status line on the screen, got:\n%s", screen)
	}
	if !strings.Contains(screen, fmt.Sprintf("pid %d, token %d", h.cmd.Process.Pid, num(started["token"]))) {
		t.Errorf("the status line does not name the holder:\n%s", screen)
	}
	t.Logf("while waiting, the screen shows:\n%s", screen)
	open()
	screen = x.eventually("the command's output", func(s string) bool { return ranAfter(s, num(started["token"])) })
	if code := x.exited(); code != 0 {
		t.Errorf("fence exited %d", code)
	}
	if screen = x.screen(); strings.Contains(screen, "waiting") {
		t.Errorf("the status line was left on the screen:\n%s", screen)
	}
	h.wait(t)
}

func TestTmuxListWatch(t *testing.T) {
	e := newEnv(t)
	x := newTmux(t, e, fenceBin, "list", "--watch", "--interval", "200ms")
	x.eventually("an empty list", func(s string) bool { return strings.Contains(s, "no keys held") })

	h, started, open := e.gated("jobs/backup")
	row := `"jobs/backup"`
	screen := x.eventually("the new lease", func(s string) bool { return strings.Contains(s, row) })
	var line string
	for _, l := range strings.Split(screen, "\n") {
		if strings.Contains(l, row) {
			line = l
		}
	}
	for _, want := range []string{strconv.Itoa(h.cmd.Process.Pid), fmt.Sprint(num(started["token"])), "until released"} {
		if !strings.Contains(line, want) {
			t.Errorf("row %q lacks %q", line, want)
		}
	}
	if n := strings.Count(screen, "fence list --watch"); n != 1 {
		t.Errorf("the table is not redrawn in place (%d headings):\n%s", n, screen)
	}
	t.Logf("with a lease held, the screen shows:\n%s", screen)

	open()
	h.wait(t)
	x.eventually("the released lease gone", func(s string) bool {
		return !strings.Contains(s, row) && strings.Contains(s, "no keys held")
	})
	x.cmd("send-keys", "-t", "fence", "C-c")
	if code := x.exited(); code != 0 {
		t.Errorf("list --watch exited %d after Ctrl-C, want 0", code)
	}
}
