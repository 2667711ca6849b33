package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/cmd/internal/storeurl"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// Real network errors, as drivers return them wrapped, get a hint that
// names the address and says what to check.
func TestHints(t *testing.T) {
	closed := testserver.ClosedAddr(t)
	_, refused := net.DialTimeout("tcp", closed, 10*time.Second)
	if refused == nil {
		t.Fatalf("a connection to %s (testserver.ClosedAddr) was accepted", closed)
	}
	timeout := &net.OpError{Op: "dial", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(10, 9, 9, 9), Port: 6379}, Err: os.ErrDeadlineExceeded}
	dns := &net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "redsi.example", IsNotFound: true}}
	for _, c := range []struct {
		err  error
		want []string
	}{
		{fmt.Errorf("fence: acquire %q: %w", "k", refused), []string{closed, "nothing accepts connections", "port"}},
		{fmt.Errorf("redis: %w", timeout), []string{"10.9.9.9:6379", "no answer", "firewall"}},
		{fmt.Errorf("fence: acquire %q: %w", "k", context.DeadlineExceeded), []string{"no answer", "in time"}},
		{fmt.Errorf("x: %w", dns), []string{`"redsi.example"`, "does not resolve", "--store"}},
		{&os.PathError{Op: "open", Path: "/x", Err: syscall.EACCES}, []string{"owner and mode"}},
		{&os.PathError{Op: "mkdir", Path: "/x", Err: syscall.ENOTDIR}, []string{"directory"}},
		{&os.PathError{Op: "open", Path: "/x", Err: syscall.EROFS}, []string{"read-only"}},
		{fmt.Errorf("%w: empty key", fence.ErrInvalidKey), []string{"non-empty UTF-8"}},
		{fmt.Errorf("%w: 1ms", fence.ErrInvalidTTL), []string{"--ttl", "at least"}},
		{fmt.Errorf("%w: list", fence.ErrUnsupported), []string{"cannot do that"}},
		{&metricsError{addr: "127.0.0.1:9464", err: &net.OpError{Op: "listen", Err: os.NewSyscallError("bind", syscall.EADDRINUSE)}}, []string{"another process", "port 0"}},
	} {
		h := hint(c.err)
		for _, w := range c.want {
			if !strings.Contains(h, w) {
				t.Errorf("hint(%v) = %q; want it to mention %q", c.err, h, w)
			}
		}
	}
	if h := hint(errors.New("something else")); h != "" {
		t.Errorf("hint for an unknown error = %q; want none", h)
	}
}

// A driver's error names the store, its URL's credentials hidden where
// the URL's structure has them, and its other parts as given.
func TestStoreErrorsNameTheStore(t *testing.T) {
	raw := "redis://admin:1@127.0.0.1:6379/0?token_retention=1h"
	s := &store{raw: raw, url: storeurl.Redact(raw)}
	err := s.wrap(fmt.Errorf("fence: acquire %q: dial tcp 127.0.0.1:6379: %w", "k", syscall.ECONNREFUSED))
	text := err.Error()
	if want := "store redis://admin:xxxxx@127.0.0.1:6379/0?token_retention=1h: acquire \"k\": dial tcp 127.0.0.1:6379: "; !strings.HasPrefix(text, want) ||
		!errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("wrapped error %q; want it to start with %q and keep its cause", text, want)
	}
	held := &fence.HeldError{Key: "k"}
	if s.wrap(held) != error(held) {
		t.Errorf("a HeldError is the user's business, not the store's: wrapped")
	}
}

func TestErrorsTellWhatToDo(t *testing.T) {
	e := newEnv(t)
	file := filepath.Join(t.TempDir(), "a-file")
	os.WriteFile(file, nil, 0o600)
	for _, c := range []struct {
		args []string
		code int
		want []string
	}{
		{[]string{"status", "--store", file, "--key", "k"}, 1, []string{"open store " + file, "must name a directory"}},
		{[]string{"list", "--store", "nosuch://u:hunter2@h"}, 2, []string{`unknown scheme "nosuch"`, "file:///dir", `"fence help" lists all`}},
		{[]string{"run", "--ttl", "30", "--key", "k", "--", "true"}, 2, []string{"needs a unit", "30s"}},
		{[]string{"run", "--wait", "soon", "--key", "k", "--", "true"}, 2, []string{"not a duration", "300ms"}},
		{[]string{"run", "--ttl", "5ms", "--key", "k", "--", "true"}, 2, []string{"at least 10ms", "--ttl 30s"}},
		{[]string{"run", "--key", strings.Repeat("k", fence.MaxKeyLen+1), "--", "true"}, 2, []string{"invalid key", "at most"}},
		{[]string{"run", "--metrics-addr", "9464", "--key", "k", "--", "true"}, 2, []string{"HOST:PORT", "127.0.0.1:9464"}},
		{[]string{"list", "--interval", "2s"}, 2, []string{"--interval goes with --watch"}},
		{[]string{"list", "--watch", "--interval", "1ms"}, 2, []string{"at least 100ms"}},
		{[]string{"status", "--bogus"}, 2, []string{"unknown flag -bogus", "fence status -h"}},
	} {
		r := e.run(c.args...)
		if r.code != c.code {
			t.Errorf("fence %.80q: exit %d, want %d; stderr:\n%s", c.args, r.code, c.code, r.stderr)
		}
		for _, w := range c.want {
			if !strings.Contains(r.stderr, w) {
				t.Errorf("fence %.80q: stderr lacks %q:\n%s", c.args, w, r.stderr)
			}
		}
		if strings.Contains(r.stderr, "hunter2") {
			t.Errorf("fence %.80q printed a password:\n%s", c.args, r.stderr)
		}
		if strings.Count(r.stderr, "\n") > 3 {
			t.Errorf("fence %.80q: a long message for one mistake:\n%s", c.args, r.stderr)
		}
	}
}

// With --json, status and list report errors as a JSON object on stderr,
// with the hint.
func TestJSONErrors(t *testing.T) {
	e := newEnv(t)
	file := filepath.Join(t.TempDir(), "a-file")
	os.WriteFile(file, nil, 0o600)
	for _, args := range [][]string{
		{"status", "--json", "--store", file, "--key", "k"},
		{"list", "--json", "--store", file},
		{"list", "--watch", "--json", "--store", file},
		{"run", "--json", "--store", file, "--key", "k", "--", "true"},
	} {
		r := e.run(args...)
		var ev event
		if err := json.Unmarshal([]byte(r.stderr), &ev); err != nil || r.code != 1 {
			t.Errorf("fence %q: exit %d, stderr %q; want exit 1 and a JSON object", args, r.code, r.stderr)
			continue
		}
		if ev.Event != "error" || !strings.Contains(ev.Error, file) || !strings.Contains(ev.Hint, "directory") || ev.Message == "" {
			t.Errorf("fence %q: error object %+v", args, ev)
		}
	}
}

// Every network store registered: an unreachable server is reported in
// bounded time, naming the address, without the credentials.
func TestUnreachableNetworkStores(t *testing.T) {
	e := newEnv(t)
	tried := 0
	for _, form := range storeurl.Forms() {
		u, err := url.Parse(strings.Fields(form)[0])
		if err != nil || u.Host == "" || u.Scheme == "file" || u.Scheme == "mem" {
			continue
		}
		tried++
		u.Host = "127.0.0.1:1" // nothing listens on port 1
		u.User = url.UserPassword("fence", "hunter2")
		r := e.run("status", "--store", u.String(), "--key", "k")
		if r.code != 1 && r.code != 2 {
			t.Errorf("%s: exit %d, want 1 (or 2 if the form needs more); stderr:\n%s", u.Scheme, r.code, r.stderr)
		}
		if strings.Contains(r.stderr, "hunter2") {
			t.Errorf("%s: password printed:\n%s", u.Scheme, r.stderr)
		}
		if r.code == 1 && !strings.Contains(r.stderr, "127.0.0.1:1") {
			t.Errorf("%s: the error does not name the address:\n%s", u.Scheme, r.stderr)
		}
		if r.code == 1 && !strings.Contains(r.stderr, "\n  ") {
			t.Errorf("%s: no hint of what to check:\n%s", u.Scheme, r.stderr)
		}
		t.Logf("%s: %s", u.Scheme, r.stderr)
	}
	if tried == 0 {
		t.Skip("no network store is registered in cmd/internal/storeurl yet")
	}
}

// A mistyped store is an error on one line (exit 2), never a file store
// in a directory named after it nor a server on localhost.
func TestMistypedStoreExits2(t *testing.T) {
	e := newEnv(t)
	cwd := t.TempDir()
	for _, store := range []string{
		"127.0.0.1:6379", "myredis", "redis//127.0.0.1:6379", // were file stores in ./
		"redis:127.0.0.1:1", "redis:", "redis://", // were localhost:6379
		"locks", "postgres:///db", "nats:", "etcd://:2379",
	} {
		for _, args := range [][]string{
			{"status", "--store", store, "--key", "k"},
			{"list", "--store", store},
			{"run", "--store", store, "--key", "k", "--", "true"},
		} {
			cmd := e.command(args...)
			cmd.Dir = cwd
			out, err := cmd.CombinedOutput()
			code := 0
			if err != nil {
				code = cmd.ProcessState.ExitCode()
			}
			msg := string(out)
			if code != 2 || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, `"fence help" lists all`) ||
				!strings.Contains(msg, "; want ") {
				t.Errorf("fence %q: exit %d, output %q; want exit 2 and one line naming the accepted forms", args, code, msg)
			}
		}
		// FENCE_STORE is held to the same rules.
		cmd := e.command("status", "--key", "k")
		cmd.Env = append(cmd.Env, "FENCE_STORE="+store)
		cmd.Dir = cwd
		if out, err := cmd.CombinedOutput(); err == nil || cmd.ProcessState.ExitCode() != 2 {
			t.Errorf("FENCE_STORE=%s fence status: %v, %s; want exit 2", store, err, out)
		}
	}
	if entries, _ := os.ReadDir(cwd); len(entries) > 0 {
		t.Errorf("fence created %v in its working directory", entries)
	}
}

// With --json, every error is one JSON object on stderr, those of the
// command line included, and nothing goes to stdout.
func TestJSONUsageErrors(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		args []string
		key  string
		want string
	}{
		{[]string{"run", "--json", "--bogus", "--key", "k", "--", "true"}, "", "unknown flag -bogus"},
		{[]string{"run", "--bogus", "--json", "--", "true"}, "", "unknown flag -bogus"},
		{[]string{"run", "--key", "k", "--ttl", "30", "-json", "--", "true"}, "k", "needs a unit"},
		{[]string{"run", "--json=true", "--wait", "soon", "--", "true"}, "", "not a duration"},
		{[]string{"run", "--json", "--", "true"}, "", "--key is required"},
		{[]string{"run", "--json", "--key", "k"}, "k", "no command"},
		{[]string{"run", "--json", "--key", "k", "--wait", "1s", "--no-wait", "--", "true"}, "k", "exclude"},
		{[]string{"run", "--json", "--key", "k", "--ttl", "5ms", "--", "true"}, "k", "at least 10ms"},
		{[]string{"run", "--json", "--key", "", "--", "true"}, "", "--key is required"},
		{[]string{"run", "--json", "--key", "k", "--metrics-addr", "9464", "--", "true"}, "k", "HOST:PORT"},
		{[]string{"run", "--json", "--store", "myredis", "--key", "k", "--", "true"}, "k", "neither a path nor a URL"},
		{[]string{"status", "--json"}, "", "--key is required"},
		{[]string{"status", "--json", "--key", "k", "extra"}, "k", "unexpected arguments"},
		{[]string{"status", "--key", "k", "--json", "--bogus"}, "k", "unknown flag -bogus"},
		{[]string{"status", "--json", "--key", strings.Repeat("k", fence.MaxKeyLen+1)}, strings.Repeat("k", fence.MaxKeyLen+1), "invalid key"},
		{[]string{"status", "--json", "--store", "redis:", "--key", "k"}, "k", "no host"},
		{[]string{"list", "--json", "extra"}, "", "unexpected arguments"},
		{[]string{"list", "--json", "--interval", "2s"}, "", "--interval goes with --watch"},
		{[]string{"list", "--json", "--watch", "--interval", "1ms"}, "", "at least 100ms"},
		{[]string{"list", "--json", "--prefix"}, "", "flag needs an argument"},
		{[]string{"list", "--json", "--store", "127.0.0.1:6379"}, "", "neither a path nor a URL"},
	} {
		r := e.run(c.args...)
		var ev event
		if err := json.Unmarshal([]byte(r.stderr), &ev); err != nil || r.code != 2 || r.stdout != "" {
			t.Errorf("fence %.80q: exit %d, stdout %q, stderr %q; want exit 2 and one JSON object on stderr", c.args, r.code, r.stdout, r.stderr)
			continue
		}
		if ev.Event != "error" || ev.Key != c.key || !strings.Contains(ev.Message, c.want) || !strings.Contains(ev.Error, c.want) {
			t.Errorf("fence %.80q: error object %+v; want key %q and %q", c.args, ev, c.key, c.want)
		}
	}
	// Without --json, or with --json=false, the same mistakes are text.
	for _, args := range [][]string{{"status", "--bogus"}, {"status", "--json=false", "--bogus"}, {"run", "--key", "--json", "--bogus"}} {
		if r := e.run(args...); r.code != 2 || !strings.HasPrefix(r.stderr, "fence: ") {
			t.Errorf("fence %q: exit %d, stderr %q; want a text error", args, r.code, r.stderr)
		}
	}
}

func TestWantsJSON(t *testing.T) {
	fs, _, _ := newFlags("run")
	fs.String("key", "", "")
	fs.Bool("no-wait", false, "")
	for args, want := range map[string]bool{
		"--json":                      true,
		"-json --key k":               true,
		"--key k --json":              true,
		"--key --json":                false, // the key is "--json"
		"--no-wait --json":            true,
		"--json=false":                false,
		"--json=0 --bogus":            false,
		"--bogus --json":              true,
		"--key=x --json -- true":      true,
		"--key k -- --json":           false, // CMD's
		"--key k cmd --json":          false,
		"--json --json=false":         false,
		"--store /x --json=1 --key k": true,
	} {
		if got := wantsJSON(fs, strings.Fields(args)); got != want {
			t.Errorf("wantsJSON(%q) = %v, want %v", args, got, want)
		}
	}
}

// fence status quotes keys as run and list do: a key's control
// characters do not reach the terminal.
func TestStatusQuotesKeys(t *testing.T) {
	e := newEnv(t)
	key := "evil\x1b[2Jkey"
	if r := e.run("status", "--key", key); r.code != 3 || r.stdout != `"evil\x1b[2Jkey": free`+"\n" {
		t.Errorf("status of a free key: exit %d, %q", r.code, r.stdout)
	}
	e.start("run", "--json", "--key", key, "--", "sleep", "30")
	r := e.run("status", "--key", key)
	if r.code != 0 || !strings.HasPrefix(r.stdout, `"evil\x1b[2Jkey": held by `) || strings.Contains(r.stdout, "\x1b") {
		t.Errorf("status of a held key: exit %d, %q", r.code, r.stdout)
	}
}

// Help goes to stdout with exit 0; --version names the version.
func TestHelpAndVersion(t *testing.T) {
	e := newEnv(t)
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}, {"run", "-h"}, {"run", "--help"}, {"status", "-h"}, {"list", "--help"}} {
		r := e.run(args...)
		if r.code != 0 || r.stderr != "" || !strings.Contains(r.stdout, "usage") && !strings.Contains(r.stdout, "Usage") {
			t.Errorf("fence %q: exit %d, stdout %q, stderr %q; want the usage on stdout", args, r.code, r.stdout, r.stderr)
		}
	}
	for _, arg := range []string{"--version", "-version", "version"} {
		if r := e.run(arg); r.code != 0 || r.stdout != "fence (devel)\n" || r.stderr != "" {
			t.Errorf("fence %s: exit %d, stdout %q, stderr %q", arg, r.code, r.stdout, r.stderr)
		}
	}
	if got := version(&debug.BuildInfo{Main: debug.Module{Path: "github.com/fencing/fence", Version: "v1.4.2"}}, true); got != "v1.4.2" {
		t.Errorf("version of a module build = %q", got)
	}
	if got := version(nil, false); got != "(devel)" {
		t.Errorf("version without build info = %q", got)
	}
}
