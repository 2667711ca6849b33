package testserver

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// FakeClock is a wall clock that a test moves under a running server: the
// server process is started with a small library of this package
// preloaded (clockShimC, compiled with gcc), which adds an offset that
// the test stores in a shared file to every wall-clock reading. Only the
// wall clock (CLOCK_REALTIME, gettimeofday, time) moves, as an NTP step
// moves it; the monotonic clock does not.
//
// It works for programs that read the clock through the C library:
// PostgreSQL, MariaDB and redis-server, node (Azurite, dynalite) and the
// JVM (ZooKeeper). Go programs read it through the kernel's vDSO, not
// the C library: a nats-server on a clock is a build of its own whose
// time package adds the same offset (goClockBinary). etcd (Debian's
// package) and kube-apiserver are not built that way, and their starters
// do not take the Clock option.
type FakeClock struct {
	dir, lib, path string
	mem            []byte // the offset file, mapped: an int64 of nanoseconds

	mu     sync.Mutex
	offset time.Duration
	users  int // processes started on it
}

// HaveFakeClock reports whether a FakeClock can be made here (gcc is
// installed), for a caller that can do without one.
func HaveFakeClock() bool {
	_, err := lookup("gcc")
	return err == nil
}

// NewFakeClock returns a clock at the real time. Without gcc it reports
// the server unavailable (a skip, or a failure under FENCE_TEST_STRICT=1).
func NewFakeClock(tb testing.TB) *FakeClock {
	tb.Helper()
	if _, err := lookup("gcc"); err != nil {
		Unavailable(tb, "%v", err)
	}
	shim, err := buildClockShim()
	if err != nil {
		tb.Fatalf("testserver: %v", err)
	}
	// A server run as another user (PostgreSQL under root) must read the
	// library and the offset: both live in a directory of the clock's.
	c := &FakeClock{dir: dataDir(tb, "clock")}
	if err := os.Chmod(c.dir, 0o755); err != nil {
		tb.Fatalf("testserver: %v", err)
	}
	c.lib = filepath.Join(c.dir, "fakeclock.so")
	c.path = filepath.Join(c.dir, "offset")
	if err := copyFile(shim, c.lib, 0o755); err != nil {
		tb.Fatalf("testserver: %v", err)
	}
	if err := os.WriteFile(c.path, make([]byte, 8), 0o644); err != nil {
		tb.Fatalf("testserver: %v", err)
	}
	f, err := os.OpenFile(c.path, os.O_RDWR, 0)
	if err != nil {
		tb.Fatalf("testserver: %v", err)
	}
	defer f.Close()
	if c.mem, err = syscall.Mmap(int(f.Fd()), 0, 8, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED); err != nil {
		tb.Fatalf("testserver: mapping the fake clock's offset: %v", err)
	}
	tb.Cleanup(func() { _ = syscall.Munmap(c.mem) })
	return c
}

// Clock starts the server on c: Postgres, PostgresPair, MariaDB, Redis,
// Redises, RedisCluster, RedisClusterReplicas, RedisSentinel (its data
// servers), Azurite, AzuriteTable, Dynalite, ZooKeeper, ZooKeeperEnsemble,
// NATS and NATSCluster take it; the other starters fail the test when
// given it.
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
	c.offset += d
	atomic.StoreInt64((*int64)(unsafe.Pointer(&c.mem[0])), int64(c.offset))
	return nil
}

// Offset returns how far the clock is from the real time.
func (c *FakeClock) Offset() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.offset
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
	return []string{"LD_PRELOAD=" + c.lib, "FENCE_FAKE_CLOCK=" + c.path}
}
