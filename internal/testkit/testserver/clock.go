package testserver

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// libfaketimeGlob is where Debian's libfaketime package puts the library
// (a directory per architecture); scripts/test looks in the same place.
const libfaketimeGlob = "/usr/lib/*/faketime/libfaketime.so.1"

// FakeClock is a wall clock that a test moves under a running server: the
// server process is started with libfaketime preloaded (Debian package
// libfaketime), reading its offset from a file on every clock call. Only
// the wall clock (CLOCK_REALTIME, gettimeofday, time) moves, as an NTP
// step moves it; the monotonic clock does not.
//
// libfaketime works for programs that read the clock through the C
// library and do not allocate with jemalloc (wolfcw/libfaketime#130):
// PostgreSQL does; redis-server (jemalloc) and the Go and Java servers do
// not, and their starters do not take the Clock option.
type FakeClock struct {
	lib, path string

	mu     sync.Mutex
	offset time.Duration
	users  int // processes started on it
}

// HaveFakeClock reports whether libfaketime is installed, for a caller
// that can do without a FakeClock.
func HaveFakeClock() bool {
	libs, _ := filepath.Glob(libfaketimeGlob)
	return len(libs) > 0
}

// NewFakeClock returns a clock at the real time. Without libfaketime it
// reports the server unavailable (a skip, or a failure under
// FENCE_TEST_STRICT=1).
func NewFakeClock(tb testing.TB) *FakeClock {
	tb.Helper()
	c := &FakeClock{}
	if libs, _ := filepath.Glob(libfaketimeGlob); len(libs) > 0 {
		c.lib = libs[0]
	} else {
		Unavailable(tb, "libfaketime is not installed (Debian package libfaketime; no %s)", libfaketimeGlob)
	}
	// A server run as another user (PostgreSQL under root) must read it.
	dir := dataDir(tb, "clock")
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatalf("testserver: %v", err)
	}
	c.path = filepath.Join(dir, "offset")
	if err := c.write(0); err != nil {
		tb.Fatalf("testserver: %v", err)
	}
	return c
}

// Clock starts the server on c. Only Postgres takes it; the other starters
// fail the test when given it.
func Clock(c *FakeClock) Option {
	return func(o *options) { o.clock = c }
}

// Jump moves the clock by d (back if d < 0) for every process started on
// it, from their next clock call on. It fails if no process runs on the
// clock: a jump that moves nothing must not pass for one that did.
func (c *FakeClock) Jump(d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.users == 0 {
		return errors.New("testserver: no server was started on this clock")
	}
	if err := c.write(c.offset + d); err != nil {
		return err
	}
	c.offset += d
	return nil
}

// Offset returns how far the clock is from the real time.
func (c *FakeClock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
}

// write replaces the offset file at once (a rename), so that a server
// never reads half of it. libfaketime reads "+Ns" or "-Ns" as an offset
// from the real time.
func (c *FakeClock) write(offset time.Duration) error {
	tmp := c.path + ".tmp"
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%+.6fs\n", offset.Seconds()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, c.path)
}

// env is the environment a process on the clock starts with; nil for no
// clock.
func (c *FakeClock) env() []string {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	c.users++
	c.mu.Unlock()
	return []string{
		"LD_PRELOAD=" + c.lib,
		"FAKETIME_TIMESTAMP_FILE=" + c.path,
		"FAKETIME_NO_CACHE=1",   // read the file on every call: jumps land at once
		"DONT_FAKE_MONOTONIC=1", // an NTP step moves the wall clock only
	}
}
