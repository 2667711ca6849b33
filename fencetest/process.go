package fencetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing/fence"
)

// Contender processes re-execute the test binary. Run recognises them by
// envWorker and calls runWorker instead of the suite. A worker exits when
// its parent process is gone, so it never outlives the test.

const (
	roleContend   = "contend"
	roleHold      = "hold"
	rolePartition = "partition"
)

// process is a contender process.
type process struct {
	cmd  *exec.Cmd
	out  *lockedBuffer // its output
	done chan struct{} // closed once it has exited, with err
	err  error
}

// startWorker starts a contender process in role on key, sharing dir,
// with env added to its environment. It is killed when the test ends.
func (s *suite) startWorker(t *testing.T, role, key, dir string, count int, env ...string) *process {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+runPattern(s.name), "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(),
		envWorker+"="+s.name,
		envConnect+"="+s.store.Connect,
		envRole+"="+role,
		envKey+"="+key,
		envDir+"="+dir,
		envCount+"="+strconv.Itoa(count),
		envTTL+"="+s.cfg.TTL.String(),
	)
	cmd.Env = append(cmd.Env, env...)
	p := &process{cmd: cmd, out: &lockedBuffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting contender process: %v", err)
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(p.kill)
	return p
}

// kill ends the process with SIGKILL and waits until it has exited.
func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// lockedBuffer collects a process's output, written and read at once.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (w *lockedBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func (s *suite) mutualExclusionProcesses(t *testing.T) {
	if s.cfg.SingleProcess {
		t.Skip("the store lives in one process (Config.SingleProcess)")
	}
	key := s.key(t, "k")
	dir := t.TempDir()
	const procs, rounds = 3, 8
	var ps []*process
	for range procs {
		ps = append(ps, s.startWorker(t, roleContend, key, dir, rounds))
	}
	timeout := time.After(10 * s.slack())
	for i, p := range ps {
		select {
		case <-p.done:
			if p.err != nil {
				t.Errorf("contender process failed: %v", p.err)
			}
		case <-timeout:
			t.Fatalf("contender processes did not finish within %v (%d of %d done)", 10*s.slack(), i, procs)
		}
	}
	if t.Failed() {
		for i, p := range ps {
			t.Logf("contender %d output:\n%s", i, p.out)
		}
	}
	if v := readLines(t, filepath.Join(dir, "violations")); len(v) > 0 {
		t.Errorf("mutual exclusion across processes violated %d times: %q", len(v), v)
	}
	if e := readLines(t, filepath.Join(dir, "errors")); len(e) > 0 {
		t.Errorf("contender processes reported: %q", e)
	}
	var tokens []int64
	for _, line := range readLines(t, filepath.Join(dir, "tokens")) {
		n, err := strconv.ParseInt(line, 10, 64)
		if err != nil {
			t.Fatalf("bad token line %q", line)
		}
		tokens = append(tokens, n)
	}
	checkIncreasing(t, tokens, procs*rounds)
}

func (s *suite) holderDies(t *testing.T) {
	if s.cfg.SingleProcess {
		t.Skip("the store lives in one process (Config.SingleProcess)")
	}
	ctx := s.ctx(t)
	b := s.client(t)
	key := s.key(t, "k")
	dir := t.TempDir()
	p := s.startWorker(t, roleHold, key, dir, 1)
	heldFile := filepath.Join(dir, "held")
	var token int64
	deadline := time.Now().Add(5 * s.slack())
	for token == 0 {
		if lines := readLines(t, heldFile); len(lines) > 0 {
			token, _ = strconv.ParseInt(lines[0], 10, 64)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("holder process did not acquire within %v; output:\n%s", 5*s.slack(), p.out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	expectHeld(t, ctx, b, key, "key held by another process")
	p.kill()
	killed := time.Now()

	limit := s.cfg.TTL + s.slack()
	l, err := b.Acquire(ctx, key, fence.WithWait(limit))
	if err != nil {
		t.Fatalf("Acquire after the holder process was killed: %v (waited %v)", err, time.Since(killed))
	}
	took := time.Since(killed)
	t.Logf("key free %v after its holder was killed", took)
	if s.cfg.SessionBound && took > s.slack() {
		t.Errorf("session-bound key took %v to free after its holder died; want promptly", took)
	}
	if l.Token() <= token {
		t.Errorf("token %d after the holder died is not greater than the dead holder's %d", l.Token(), token)
	}
	mustRelease(t, ctx, l)
}

// runWorker is the body of a contender process.
func runWorker(t *testing.T, cfg Config) {
	// Exit when the parent goes away: the test process never outlives the
	// test that started it.
	parent, stop := os.Getppid(), make(chan struct{})
	var watching sync.WaitGroup
	watching.Go(func() {
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if os.Getppid() != parent {
					os.Exit(3)
				}
			}
		}
	})
	defer watching.Wait()
	defer close(stop)
	dir, key := os.Getenv(envDir), os.Getenv(envKey)
	count, _ := strconv.Atoi(os.Getenv(envCount))
	ttl, err := time.ParseDuration(os.Getenv(envTTL))
	if err != nil {
		t.Fatalf("worker: bad %s: %v", envTTL, err)
	}
	drv, closeDrv, err := cfg.Open(os.Getenv(envConnect))
	if err != nil {
		t.Fatalf("worker: Open: %v", err)
	}
	c := fence.New(drv, fence.WithTTL(ttl))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
		if closeDrv != nil {
			_ = closeDrv()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	report := func(name, format string, args ...any) {
		appendLine(t, filepath.Join(dir, name), fmt.Sprintf(format, args...))
	}

	switch role := os.Getenv(envRole); role {
	case roleContend:
		marker := filepath.Join(dir, "inside")
		for range count {
			l, err := c.Acquire(ctx, key)
			if err != nil {
				report("errors", "pid %d: Acquire: %v", os.Getpid(), err)
				return
			}
			f, err := os.OpenFile(marker, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if errors.Is(err, os.ErrExist) {
				report("violations", "pid %d token %d entered while another process was inside", os.Getpid(), l.Token())
			} else if err != nil {
				t.Fatal(err)
			} else {
				f.Close()
			}
			report("tokens", "%d", l.Token())
			time.Sleep(time.Millisecond)
			if err == nil {
				os.Remove(marker)
			}
			if err := l.Err(); err != nil {
				report("errors", "pid %d: lease lost inside the critical section: %v", os.Getpid(), err)
			}
			if err := l.Release(ctx); err != nil {
				report("errors", "pid %d: Release: %v", os.Getpid(), err)
			}
		}
	case rolePartition:
		partitionWorker(t, c, key, count)
	case roleHold:
		l, err := c.Acquire(ctx, key)
		if err != nil {
			t.Fatalf("worker: Acquire: %v", err)
		}
		report("held", "%d", l.Token())
		<-ctx.Done() // until killed
	default:
		t.Fatalf("worker: unknown role %q", role)
	}
}

// appendLine appends one line to the file at path; each line is one write,
// so lines from several processes do not interleave.
func appendLine(t *testing.T, path, line string) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(line + "\n"); err != nil {
		t.Fatal(err)
	}
}

func readLines(t *testing.T, path string) []string {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}
