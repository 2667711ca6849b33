package fencesqlite_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencesqlite"
)

func req(key, owner string, ttl time.Duration) fence.Request {
	return fence.Request{Key: key, Owner: owner, TTL: ttl}
}

// clock is a wall clock a test can step.
type clock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *clock) step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset += d
}

// Tokens never go back: not across release and re-acquire, not when the
// key's row is deleted behind fence's back (the next token comes from the
// clock), and not when the clock is set back while the row exists.
func TestTokensMonotonicAfterRowDeleted(t *testing.T) {
	ctx := context.Background()
	var clk clock
	s := open(t, filepath.Join(t.TempDir(), "fence.db"), fencesqlite.WithClock(clk.now))
	var last int64
	take := func(what string) {
		t.Helper()
		c, err := s.TryAcquire(ctx, req("k", "o-"+what, time.Minute))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if c.Token() <= last {
			t.Fatalf("%s: token %d after %d", what, c.Token(), last)
		}
		last = c.Token()
		if err := c.Release(ctx); err != nil {
			t.Fatalf("%s: release: %v", what, err)
		}
	}
	take("first")
	if last < time.Now().UnixMicro()-int64(time.Hour/time.Microsecond) {
		t.Errorf("first token %d is not seeded from the clock", last)
	}
	take("again")
	if _, err := s.DB().ExecContext(ctx, `DELETE FROM fence_locks WHERE key = 'k'`); err != nil {
		t.Fatal(err)
	}
	take("after the row was deleted")
	if _, err := s.DB().ExecContext(ctx, `DELETE FROM fence_locks`); err != nil {
		t.Fatal(err)
	}
	take("after the table was emptied")
	clk.step(-time.Hour)
	take("after the clock was set back an hour")
	take("again, an hour back")
}

// A step of the wall clock moves the store's expiry (the store has no
// clock of its own): forwards, a lease ends early in the store; backwards,
// it lasts longer. docs/sqlite.md says so.
func TestClockStepMovesExpiry(t *testing.T) {
	ctx := context.Background()
	var clk clock
	s := open(t, filepath.Join(t.TempDir(), "fence.db"), fencesqlite.WithClock(clk.now))
	a, err := s.TryAcquire(ctx, req("fwd", "a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	clk.step(2 * time.Minute)
	b, err := s.TryAcquire(ctx, req("fwd", "b", time.Minute))
	if err != nil {
		t.Fatalf("after the clock jumped past the expiry: %v; want the key taken over", err)
	}
	if b.Token() <= a.Token() {
		t.Errorf("token %d after %d", b.Token(), a.Token())
	}
	if err := a.Extend(ctx, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("old holder's Extend: %v; want ErrNotHeld", err)
	}

	c, err := s.TryAcquire(ctx, req("back", "c", time.Second))
	if err != nil {
		t.Fatal(err)
	}
	clk.step(-time.Hour)
	time.Sleep(1100 * time.Millisecond)
	_, err = s.TryAcquire(ctx, req("back", "d", time.Second))
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Owner != "c" {
		t.Fatalf("after the clock was set back: %v; want still held by c", err)
	}
	if held.Holder.ExpiresIn < 59*time.Minute {
		t.Errorf("expires in %v after the clock was set back an hour; want about an hour", held.Holder.ExpiresIn)
	}
	if err := c.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// A transaction that cannot get the write lock waits for the busy timeout,
// and then fails with an error that is not ErrHeld; once the lock is free,
// operations go through.
func TestBusyTimeout(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "fence.db")
	s := open(t, path, fencesqlite.WithBusyTimeout(100*time.Millisecond))
	blocker := open(t, path)
	tx, err := blocker.DB().BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = s.TryAcquire(ctx, req("k", "o", time.Minute))
	if err == nil || errors.Is(err, fence.ErrHeld) || !strings.Contains(err.Error(), "locked") {
		t.Errorf("TryAcquire while another connection writes: %v; want database is locked", err)
	}
	if d := time.Since(start); d < 90*time.Millisecond || d > 5*time.Second {
		t.Errorf("gave up after %v; want the busy timeout, 100ms", d)
	}
	// The context ends the wait before a longer busy timeout does.
	long := open(t, path, fencesqlite.WithBusyTimeout(time.Minute))
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	start = time.Now()
	_, err = long.TryAcquire(cctx, req("k", "o", time.Minute))
	cancel()
	if err == nil || time.Since(start) > 10*time.Second {
		t.Errorf("TryAcquire with a 200ms context: %v after %v", err, time.Since(start))
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	c, err := s.TryAcquire(ctx, req("k", "o", time.Minute))
	if err != nil {
		t.Fatalf("once the write lock is free: %v", err)
	}
	_ = c.Release(ctx)
}

// Every connection is in WAL mode, syncs every commit, and waits for the
// write lock up to the busy timeout.
func TestConnectionSettings(t *testing.T) {
	ctx := context.Background()
	s := open(t, filepath.Join(t.TempDir(), "fence.db"), fencesqlite.WithBusyTimeout(1234*time.Millisecond))
	conn, err := s.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for pragma, want := range map[string]string{"journal_mode": "wal", "synchronous": "2", "busy_timeout": "1234"} {
		var got string
		if err := conn.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil || got != want {
			t.Errorf("PRAGMA %s = %q, %v; want %s", pragma, got, err, want)
		}
	}
}

func TestOpenRefusals(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		path string
		opts []fencesqlite.Option
		is   error
	}{
		{"empty path", "", nil, fence.ErrInvalidOption},
		{"busy timeout 0", filepath.Join(dir, "a.db"), []fencesqlite.Option{fencesqlite.WithBusyTimeout(0)}, fence.ErrInvalidOption},
		{"no directory", filepath.Join(dir, "missing", "a.db"), nil, os.ErrNotExist},
	} {
		if _, err := fencesqlite.Open(tc.path, tc.opts...); !errors.Is(err, tc.is) {
			t.Errorf("%s: %v; want %v", tc.name, err, tc.is)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "a.db")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused Open created the database: %v", err)
	}
	// A path with characters special in a URI is the file it names.
	odd := filepath.Join(dir, "a ?#%.db")
	s := open(t, odd)
	if s.Path() != odd {
		t.Errorf("Path() = %q; want %q", s.Path(), odd)
	}
	if _, err := os.Stat(odd); err != nil {
		t.Errorf("database not at its path: %v", err)
	}
}
