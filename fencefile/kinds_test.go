package fencefile_test

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
	"syscall"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencefile"
)

func kindReq(key, owner string, kind fence.Kind, limit int) fence.Request {
	return fence.Request{Key: key, Owner: owner, TTL: time.Second, Kind: kind, Limit: limit}
}

func tryKind(t *testing.T, s *fencefile.Store, key, owner string, kind fence.Kind, limit int) fence.Claim {
	t.Helper()
	c, err := s.TryAcquire(context.Background(), kindReq(key, owner, kind, limit))
	if err != nil {
		t.Fatalf("TryAcquire(%s %q, limit %d): %v", kind, key, limit, err)
	}
	return c
}

func expectHeldKind(t *testing.T, s *fencefile.Store, key string, kind fence.Kind, limit int, why string) *fence.HeldError {
	t.Helper()
	c, err := s.TryAcquire(context.Background(), kindReq(key, "other", kind, limit))
	var held *fence.HeldError
	if !errors.As(err, &held) {
		if c != nil {
			c.Release(context.Background())
		}
		t.Fatalf("%s: TryAcquire(%s %q) = %v; want a *HeldError", why, kind, key, err)
	}
	return held
}

// startHolder starts a process that takes kind on key in s and prints its
// token; the returned function kills it with SIGKILL.
func startHolder(t *testing.T, s *fencefile.Store, key, kind string) (pid int, token int64, kill func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+s.Dir(), holderKeyEnv+"="+key, holderKindEnv+"="+kind)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	kill = func() {
		cmd.Process.Signal(syscall.SIGKILL)
		cmd.Wait()
	}
	t.Cleanup(kill)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("holder process (%s): %v", kind, err)
	}
	if _, err := fmt.Sscanf(line, "token %d", &token); err != nil {
		t.Fatalf("holder said %q", line)
	}
	return cmd.Process.Pid, token, kill
}

// Slots are held by processes; a killed holder's slot is free at once and
// the next token is above every earlier slot's.
func TestSemaphoreHolderProcesses(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	_, tok1, kill1 := startHolder(t, s, "gpu", "semaphore")
	_, tok2, _ := startHolder(t, s, "gpu", "semaphore")
	if tok2 <= tok1 {
		t.Errorf("second slot's token %d not above the first's %d", tok2, tok1)
	}
	expectHeldKind(t, s, "gpu", fence.KindSemaphore, 2, "both slots held")
	if _, err := s.TryAcquire(ctx, kindReq("gpu", "x", fence.KindSemaphore, 3)); !errors.Is(err, fence.ErrLimitMismatch) {
		t.Errorf("limit 3 while held with 2: %v; want ErrLimitMismatch", err)
	}
	kill1()
	c := tryKind(t, s, "gpu", "me", fence.KindSemaphore, 2)
	defer c.Release(ctx)
	if c.Token() <= tok2 {
		t.Errorf("token %d after the kill, not above %d", c.Token(), tok2)
	}
}

// A holder left in a high slot still makes a smaller limit a mismatch:
// the check covers every slot of the limit the holders were granted with,
// not only the slots of the limit asked for.
func TestSemaphoreLimitMismatchHighSlot(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	var cs []fence.Claim
	for i := range 3 {
		cs = append(cs, tryKind(t, s, "k", "o"+strconv.Itoa(i), fence.KindSemaphore, 3))
	}
	cs[0].Release(ctx)
	cs[1].Release(ctx)
	if _, err := s.TryAcquire(ctx, kindReq("k", "x", fence.KindSemaphore, 1)); !errors.Is(err, fence.ErrLimitMismatch) {
		t.Fatalf("limit 1 while slot 3 of 3 is held: %v; want ErrLimitMismatch", err)
	}
	cs[2].Release(ctx)
	c := tryKind(t, s, "k", "x", fence.KindSemaphore, 1)
	if c.Token() <= cs[2].Token() {
		t.Errorf("token %d after three grants; want > %d", c.Token(), cs[2].Token())
	}
	expectHeldKind(t, s, "k", fence.KindSemaphore, 1, "limit 1, held")
	c.Release(ctx)
}

// A lock, a semaphore and a reader-writer lock on one key are distinct;
// List shows locks only.
func TestKindsAreSeparate(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	l := mustAcquire(t, s, "k", "lock")
	sem := tryKind(t, s, "k", "sem", fence.KindSemaphore, 1)
	w := tryKind(t, s, "k", "writer", fence.KindWrite, 0)
	hs, err := s.List(ctx, "")
	if err != nil || len(hs) != 1 || hs[0].Owner != "lock" {
		t.Errorf("List = %+v, %v; want the lock only", hs, err)
	}
	for _, c := range []fence.Claim{l, sem, w} {
		if err := c.Extend(ctx, time.Second); err != nil {
			t.Errorf("Extend: %v", err)
		}
		if err := c.Release(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
		if err := c.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
			t.Errorf("second Release: %v; want ErrNotHeld", err)
		}
	}
}

// Readers in other processes share the key; a writer that finds them there
// keeps new readers out for rwpref.MinIntent (2s here, the TTL being 1s), and
// once it stops trying, readers get in again. A killed reader frees its
// share at once, and the writer's token is above every reader's.
func TestRWHolderProcesses(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	_, r1, kill1 := startHolder(t, s, "doc", "read")
	_, r2, kill2 := startHolder(t, s, "doc", "read")
	r3 := tryKind(t, s, "doc", "r3", fence.KindRead, 0)

	expectHeldKind(t, s, "doc", fence.KindWrite, 0, "readers hold")
	intentAt := time.Now()
	held := expectHeldKind(t, s, "doc", fence.KindRead, 0, "a writer waits")
	if held.Holder == nil || held.Holder.ExpiresIn <= 0 || held.Holder.ExpiresIn > 2*time.Second {
		t.Errorf("reader kept out by a waiting writer: holder %+v; want the intent's time left", held.Holder)
	}
	// The writer gives up: its intent lapses.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := s.TryAcquire(ctx, kindReq("doc", "r4", fence.KindRead, 0))
		if err == nil {
			if since := time.Since(intentAt); since < 2*time.Second {
				t.Errorf("reader admitted %v after the writer's attempt; want the intent to last 2s", since)
			}
			c.Release(ctx)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a cancelled writer's intent kept readers out for 10s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	kill1()
	kill2()
	expectHeldKind(t, s, "doc", fence.KindWrite, 0, "one reader left")
	r3.Release(ctx)
	w := tryKind(t, s, "doc", "w", fence.KindWrite, 0)
	if w.Token() <= max(r1, r2, r3.Token()) {
		t.Errorf("writer's token %d not above the readers' %d, %d, %d", w.Token(), r1, r2, r3.Token())
	}
	w.Release(ctx)
}

// A writer process excludes readers and writers and is named in their
// refusals; killed, it frees the key at once.
func TestRWWriterProcessKilled(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	pid, tok, kill := startHolder(t, s, "doc", "write")
	for _, k := range []fence.Kind{fence.KindRead, fence.KindWrite} {
		held := expectHeldKind(t, s, "doc", k, 0, "writer holds")
		if held.Holder == nil || held.Holder.Token != tok || held.Holder.Meta["pid"] != strconv.Itoa(pid) {
			t.Errorf("%s refused: holder %+v; want the writer, pid %d token %d", k, held.Holder, pid, tok)
		}
	}
	kill()
	// The second refusal above was a writer's: it waits, and readers with
	// it, until its intent lapses or a writer gets in.
	w := tryKind(t, s, "doc", "w", fence.KindWrite, 0)
	if w.Token() <= tok {
		t.Errorf("token %d after the writer was killed, not above %d", w.Token(), tok)
	}
	w.Release(ctx)
	r := tryKind(t, s, "doc", "r", fence.KindRead, 0)
	if r.Token() <= w.Token() {
		t.Errorf("reader's token %d not above the writer's %d", r.Token(), w.Token())
	}
	r.Release(ctx)
}

// Replacing a reader-writer lock file behind its holders' backs is loss
// for readers and writer alike.
func TestRWTamperingDetected(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	r := tryKind(t, s, "doc", "r", fence.KindRead, 0)
	path := ""
	entries, _ := os.ReadDir(s.Dir())
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".rw") {
			path = filepath.Join(s.Dir(), e.Name())
		}
	}
	if path == "" {
		t.Fatalf("no .rw file in %v", entries)
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := r.Extend(ctx, time.Second); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("reader's Extend after its file was removed: %v; want ErrNotHeld", err)
	}
	w := tryKind(t, s, "doc", "w", fence.KindWrite, 0)
	defer w.Release(ctx)
	if w.Token() <= r.Token() {
		t.Errorf("writer's token %d not above the lost reader's %d", w.Token(), r.Token())
	}
}

// A damaged counter file continues from the clock, never back.
func TestCorruptCounterNeverGoesBack(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	c := tryKind(t, s, "k", "o", fence.KindSemaphore, 2)
	c.Release(ctx)
	entries, _ := os.ReadDir(s.Dir())
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sem-count") {
			os.WriteFile(filepath.Join(s.Dir(), e.Name()), []byte("{garbage"), 0o600)
		}
	}
	c = tryKind(t, s, "k", "o", fence.KindSemaphore, 2)
	defer c.Release(ctx)
	if c.Token() < time.Now().Add(-time.Hour).UnixMicro() {
		t.Errorf("token after a damaged counter = %d, want one seeded from the clock", c.Token())
	}
}

// kindCase is one kind of lease, with the files that hold its state.
type kindCase struct {
	name  string
	kind  fence.Kind
	limit int
	// files are the endings (after "NAME.HASH.") of the key's files of
	// this kind: the counter and the file the holder locks.
	files []string
}

var kindCases = []kindCase{
	{"lock", fence.KindLock, 0, []string{"lock"}},
	{"semaphore", fence.KindSemaphore, 2, []string{"sem-count", "sem-0", "sem-1"}},
	{"read", fence.KindRead, 0, []string{"rw", "rw-count"}},
	{"write", fence.KindWrite, 0, []string{"rw", "rw-count"}},
}

// keyFiles returns the paths of key's files of kind kc in s's directory.
func keyFiles(s *fencefile.Store, key string, kc kindCase) []string {
	base := strings.TrimSuffix(s.Path(key), ".lock")
	var paths []string
	for _, end := range kc.files {
		paths = append(paths, base+"."+end)
	}
	return paths
}

func removeFiles(t *testing.T, paths []string) {
	t.Helper()
	for _, p := range paths {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
	}
}
