package testserver

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// Child is a copy of the test binary that runs the test which started it:
// a process of the test's own, for it to kill with SIGKILL (a waiter or a
// holder that dies without a word).
type Child struct {
	cmd     *exec.Cmd
	logPath string        // its stdout and stderr
	done    chan struct{} // closed once the process has exited
}

// Rerun starts a Child that runs only tb's test (-test.run matches its
// name exactly), with env ("KEY=value") added to its environment. The test
// must recognise the child by that environment, first thing, and do the
// child's part instead of its own. The child is killed when the test
// ends, and by the kernel if the test binary dies first, so it never
// outlives the test. Like the servers, it is forked from this package's
// spawner thread, which leakcheck must be told of (IgnoreLeaks).
func Rerun(tb testing.TB, env ...string) *Child {
	tb.Helper()
	parts := strings.Split(tb.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	log, err := os.CreateTemp(tb.TempDir(), "child-*.log")
	if err != nil {
		tb.Fatalf("testserver: %v", err)
	}
	defer log.Close() // the child has its own copy
	cmd := exec.Command(os.Args[0], "-test.run="+strings.Join(parts, "/"), "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := startOnSpawner(cmd); err != nil {
		tb.Fatalf("testserver: starting a child process of %s: %v", tb.Name(), err)
	}
	c := &Child{cmd: cmd, logPath: log.Name(), done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(c.done)
	}()
	tb.Cleanup(c.Kill)
	return c
}

// Pid returns the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Kill sends the child SIGKILL and waits until it has exited. Killing a
// child that has exited already does nothing.
func (c *Child) Kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// Output returns what the child has printed so far, stdout and stderr.
func (c *Child) Output() string {
	b, _ := os.ReadFile(c.logPath)
	return string(b)
}
