package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fencing/fence/cmd/internal/torture"
)

func TestMain(m *testing.M) {
	if torture.IsWorker() {
		os.Exit(torture.WorkerMain())
	}
	os.Exit(m.Run())
}

func runTool(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := runMain(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func TestPauseGuarded(t *testing.T) {
	code, out, errOut := runTool(t, "--store", "mem", "--fault", "pause", "--ttl", "500ms", "--duration", "3s", "--register", "memory",
		"--logs", t.TempDir(), "--html", t.TempDir())
	if code != exitOK {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	if !strings.Contains(out, "mem  pause    yes") || strings.Contains(out, "NO") {
		t.Errorf("summary:\n%s", out)
	}
}

func TestPauseNoGuardFails(t *testing.T) {
	html := t.TempDir()
	code, out, errOut := runTool(t, "--store", "mem", "--fault", "pause", "--ttl", "500ms", "--duration", "3s", "--register", "memory",
		"--no-guard", "--logs", t.TempDir(), "--html", html)
	if code != exitFailed {
		t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, exitFailed, out, errOut)
	}
	if !strings.Contains(out, "NO") || !strings.Contains(out, "register accepted a stale write") {
		t.Errorf("summary does not show the corruption:\n%s", out)
	}
	if m, _ := filepath.Glob(filepath.Join(html, "*.html")); len(m) != 1 {
		t.Errorf("visualizations written: %q; want one", m)
	}
}

// TestKinds: --kind runs the semaphore and reader-writer plans, and the
// summary says which row is which.
func TestKinds(t *testing.T) {
	code, out, errOut := runTool(t, "--store", "mem", "--fault", "kill", "--kind", "semaphore,rw", "--ttl", "500ms", "--duration", "3s",
		"--register", "memory", "--logs", t.TempDir(), "--html", t.TempDir())
	if code != exitOK {
		t.Fatalf("exit %d; stdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	for _, want := range []string{`mem\s+kill\s+yes\s+semaphore\(2\)\s`, `mem\s+kill\s+yes\s+rw\s`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("summary lacks a row matching %s:\n%s", want, out)
		}
	}
}

func TestUsage(t *testing.T) {
	for _, args := range [][]string{
		{"--fault", "nope"},
		{"--workers", "1"},
		{"--ttl", "1s", "--duration", "2s"},
		{"extra"},
		{"--register", "disk"},
		{"--kind", "mutex"},
		{"--kind", "semaphore", "--limit", "0"},
		{"--kind", "lock,semaphore", "--limit", "3", "--workers", "3"},
	} {
		if code, _, errOut := runTool(t, args...); code != exitUsage || errOut == "" {
			t.Errorf("%q: exit %d, stderr %q; want %d and a message", args, code, errOut, exitUsage)
		}
	}
	if code, _, errOut := runTool(t, "--store", "nosuchstore", "--fault", "none"); code != exitFailed || !strings.Contains(errOut, "unknown store") {
		t.Errorf("unknown store: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runTool(t, "-h"); code != exitOK || !strings.Contains(errOut, "pause") {
		t.Errorf("-h: exit %d, stderr %q", code, errOut)
	}
}
