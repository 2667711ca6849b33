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
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencefile"
)

func newStore(t *testing.T) *fencefile.Store {
	t.Helper()
	s, err := fencefile.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func req(key, owner string) fence.Request {
	return fence.Request{Key: key, Owner: owner, TTL: time.Minute, Meta: map[string]string{"job": "backup"}}
}

func mustAcquire(t *testing.T, d fence.Driver, key, owner string) fence.Claim {
	t.Helper()
	c, err := d.TryAcquire(context.Background(), req(key, owner))
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", key, err)
	}
	return c
}

func TestAcquireHeldRelease(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	start := time.Now().UnixMicro()
	a := mustAcquire(t, s, "k", "owner-a")
	if a.Token() < start {
		t.Errorf("first token = %d, want the clock in µs, at least %d", a.Token(), start)
	}
	_, err := s.TryAcquire(ctx, req("k", "owner-b"))
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil {
		t.Fatalf("second TryAcquire: %v, want a *HeldError with the holder", err)
	}
	if held.Holder.Owner != "owner-a" || held.Holder.Token != a.Token() || held.Holder.Meta["job"] != "backup" {
		t.Errorf("holder = %+v", *held.Holder)
	}
	if err := a.Extend(ctx, time.Minute); err != nil {
		t.Errorf("Extend: %v", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if err := a.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("second Release = %v, want ErrNotHeld", err)
	}
	if _, err := s.Inspect(ctx, "k"); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Inspect after release = %v, want ErrNotHeld", err)
	}
	b := mustAcquire(t, s, "k", "owner-b")
	defer b.Release(ctx)
	if b.Token() <= a.Token() {
		t.Errorf("token after re-acquire = %d, want > %d", b.Token(), a.Token())
	}
}

func TestTokensSurviveNewStores(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	var last int64
	for i := range 3 {
		s, err := fencefile.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		c := mustAcquire(t, s, "k", "o")
		if c.Token() <= last {
			t.Fatalf("round %d: token %d not above %d", i, c.Token(), last)
		}
		last = c.Token()
		if err := c.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// Two Stores on one directory (as two processes would open it) exclude
// each other and share one token sequence.
func TestStoresShareDirectory(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s1, _ := fencefile.New(dir)
	s2, _ := fencefile.New(dir)
	const workers, rounds = 4, 25
	var (
		mu      sync.Mutex
		holding int
		tokens  []int64
		wg      sync.WaitGroup
	)
	for w := range workers {
		s := s1
		if w%2 == 1 {
			s = s2
		}
		wg.Go(func() {
			for range rounds {
				var c fence.Claim
				for {
					var err error
					c, err = s.TryAcquire(ctx, req("shared", "w"))
					if err == nil {
						break
					}
					if !errors.Is(err, fence.ErrHeld) {
						t.Error(err)
						return
					}
					time.Sleep(time.Millisecond)
				}
				mu.Lock()
				holding++
				if holding > 1 {
					t.Error("two holders at once")
				}
				tokens = append(tokens, c.Token())
				mu.Unlock()
				mu.Lock()
				holding--
				mu.Unlock()
				if err := c.Release(ctx); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens not strictly increasing in grant order: %v", tokens)
		}
	}
	if len(tokens) != workers*rounds {
		t.Errorf("%d grants, want %d", len(tokens), workers*rounds)
	}
}

// A holder process killed with SIGKILL frees the key at once (the kernel
// drops its lock), and the next token is higher.
func TestHolderProcessKilled(t *testing.T) {
	s := newStore(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+s.Dir(), holderKeyEnv+"=job/nightly")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("holder process: %v", err)
	}
	var tok int64
	if _, err := fmt.Sscanf(line, "token %d", &tok); err != nil {
		t.Fatalf("holder said %q", line)
	}

	ctx := context.Background()
	_, err = s.TryAcquire(ctx, req("job/nightly", "me"))
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Meta["pid"] != strconv.Itoa(cmd.Process.Pid) {
		t.Fatalf("while the holder runs: %v, want held by pid %d", err, cmd.Process.Pid)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	c, err := s.TryAcquire(ctx, req("job/nightly", "me"))
	if err != nil {
		t.Fatalf("TryAcquire after the holder was killed: %v", err)
	}
	defer c.Release(ctx)
	if c.Token() <= tok {
		t.Errorf("token after kill = %d, want > %d", c.Token(), tok)
	}
}

func TestInspectAndList(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	keys := []string{"jobs/b", "jobs/a", "other", "jobs/free"}
	claims := map[string]fence.Claim{}
	for _, k := range keys {
		claims[k] = mustAcquire(t, s, k, "owner-"+k)
	}
	if err := claims["jobs/free"].Release(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		for k, c := range claims {
			if k != "jobs/free" {
				c.Release(ctx)
			}
		}
	}()

	h, err := s.Inspect(ctx, "jobs/a")
	if err != nil {
		t.Fatal(err)
	}
	host, _ := os.Hostname()
	if h.Key != "jobs/a" || h.Owner != "owner-jobs/a" || h.Token != claims["jobs/a"].Token() || h.ExpiresIn != 0 {
		t.Errorf("Inspect = %+v", h)
	}
	if h.Meta["job"] != "backup" || h.Meta["host"] != host || h.Meta["pid"] != strconv.Itoa(os.Getpid()) {
		t.Errorf("Inspect meta = %v", h.Meta)
	}
	if at, err := time.Parse(time.RFC3339Nano, h.Meta["acquired_at"]); err != nil || time.Since(at) > time.Minute {
		t.Errorf("acquired_at = %q (%v)", h.Meta["acquired_at"], err)
	}
	if _, err := s.Inspect(ctx, "jobs/free"); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Inspect of a released key = %v, want ErrNotHeld", err)
	}
	if _, err := s.Inspect(ctx, "never"); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Inspect of an unknown key = %v, want ErrNotHeld", err)
	}

	hs, err := s.List(ctx, "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range hs {
		got = append(got, h.Key+"="+h.Owner)
	}
	if want := "jobs/a=owner-jobs/a jobs/b=owner-jobs/b"; strings.Join(got, " ") != want {
		t.Errorf("List(jobs/) = %v, want %s", got, want)
	}
	all, err := s.List(ctx, "")
	if err != nil || len(all) != 3 {
		t.Errorf("List() = %d holders, %v; want 3", len(all), err)
	}
}

// Delete replaces the lock file: the key is free at once, the holder's
// Extend and Release report ErrNotHeld, and the old holder cannot touch
// the new one.
func TestDelete(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	if err := s.Delete("k"); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Delete of a free key = %v, want ErrNotHeld", err)
	}
	old := mustAcquire(t, s, "k", "old")
	if err := s.Delete("k"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Inspect(ctx, "k"); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Inspect after Delete = %v, want ErrNotHeld", err)
	}
	nw := mustAcquire(t, s, "k", "new")
	defer nw.Release(ctx)
	if nw.Token() <= old.Token() {
		t.Errorf("token after Delete = %d, want > %d", nw.Token(), old.Token())
	}
	if err := old.Extend(ctx, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("old Extend = %v, want ErrNotHeld", err)
	}
	if err := old.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("old Release = %v, want ErrNotHeld", err)
	}
	h, err := s.Inspect(ctx, "k")
	if err != nil || h.Owner != "new" {
		t.Errorf("Inspect = %+v, %v; want the new holder", h, err)
	}
	if err := nw.Extend(ctx, time.Minute); err != nil {
		t.Errorf("new holder's Extend: %v", err)
	}
}

// Deleting the lock file by hand, or overwriting its record, is detected
// by the holder's next Extend.
func TestTamperingDetected(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	c := mustAcquire(t, s, "deleted", "o")
	if err := os.Remove(s.Path("deleted")); err != nil {
		t.Fatal(err)
	}
	if err := c.Extend(ctx, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Extend after delete = %v, want ErrNotHeld", err)
	}

	c = mustAcquire(t, s, "overwritten", "o")
	data, _ := os.ReadFile(s.Path("overwritten"))
	data = []byte(strings.Replace(string(data), `"owner":"o"`, `"owner":"x"`, 1))
	if err := os.WriteFile(s.Path("overwritten"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Extend(ctx, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Extend after overwrite = %v, want ErrNotHeld", err)
	}
	// The claim let go of its lock: the key can be taken, with a new token.
	c2 := mustAcquire(t, s, "overwritten", "p")
	defer c2.Release(ctx)
	if c2.Token() <= c.Token() {
		t.Errorf("token = %d, want > %d", c2.Token(), c.Token())
	}
}

func TestCorruptRecordNeverGoesBack(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	c := mustAcquire(t, s, "k", "o")
	c.Release(ctx)
	if err := os.WriteFile(s.Path("k"), []byte("\x00garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	c = mustAcquire(t, s, "k", "o")
	defer c.Release(ctx)
	if c.Token() < time.Now().Add(-time.Hour).UnixMicro() {
		t.Errorf("token after a damaged counter = %d, want one seeded from the clock", c.Token())
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o600)
	for _, bad := range []string{"", file, filepath.Join(file, "sub")} {
		if _, err := fencefile.New(bad); err == nil {
			t.Errorf("New(%q) succeeded", bad)
		}
	}
	nested := filepath.Join(dir, "a", "b")
	s, err := fencefile.New(nested)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(s.Dir())
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("created dir mode = %v, %v; want 0700", fi.Mode().Perm(), err)
	}
	if os.Geteuid() != 0 {
		ro := filepath.Join(dir, "ro")
		os.Mkdir(ro, 0o500)
		if _, err := fencefile.New(ro); err == nil {
			t.Errorf("New on a read-only dir succeeded")
		}
	}
}
