package testserver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// clockShimC is the source of the library a FakeClock preloads into a
// server. It replaces the C library's wall-clock calls (clock_gettime of
// CLOCK_REALTIME and CLOCK_REALTIME_COARSE, gettimeofday, time) with the
// kernel's answer plus an offset in nanoseconds that the test stores in
// a shared 8-byte file (the path in FENCE_FAKE_CLOCK), read atomically on
// every call; other clocks pass through. It allocates nothing and calls
// no other library function on the clock path, so it runs under
// allocators that read the clock themselves (redis-server's jemalloc,
// under which libfaketime recurses and fails: wolfcw/libfaketime#130).
const clockShimC = `
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int64_t *volatile offset_ns;
static volatile int mapped;

static int64_t offset(void) {
	if (!__atomic_load_n(&mapped, __ATOMIC_ACQUIRE)) {
		const char *path = getenv("FENCE_FAKE_CLOCK");
		int64_t *m = 0;
		if (path) {
			int fd = (int)syscall(SYS_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC);
			if (fd >= 0) {
				void *p = mmap(0, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
				syscall(SYS_close, fd);
				if (p != MAP_FAILED) m = p;
			}
		}
		offset_ns = m;
		__atomic_store_n(&mapped, 1, __ATOMIC_RELEASE);
	}
	return offset_ns ? __atomic_load_n(offset_ns, __ATOMIC_SEQ_CST) : 0;
}

static void shift(struct timespec *ts) {
	int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + offset();
	ts->tv_sec = ns / 1000000000;
	ts->tv_nsec = ns % 1000000000;
	if (ts->tv_nsec < 0) { ts->tv_nsec += 1000000000; ts->tv_sec--; }
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	long r = syscall(SYS_clock_gettime, id, ts);
	if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift(ts);
	return (int)r;
}

int gettimeofday(struct timeval *tv, void *tz) {
	struct timespec ts;
	(void)tz;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
	if (tv) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
	if (t) *t = ts.tv_sec;
	return ts.tv_sec;
}
`

var clockShim struct {
	once sync.Once
	path string
	err  error
}

// buildClockShim compiles clockShimC once per test binary, with gcc, into
// the user's cache (named by the source's hash, so an edit rebuilds it).
func buildClockShim() (string, error) {
	clockShim.once.Do(func() {
		gcc, err := lookup("gcc")
		if err != nil {
			clockShim.err = err
			return
		}
		sum := sha256.Sum256([]byte(clockShimC))
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		dir := filepath.Join(cache, "fence-testserver")
		path := filepath.Join(dir, "fakeclock-"+hex.EncodeToString(sum[:8])+".so")
		if _, err := os.Stat(path); err == nil {
			clockShim.path = path
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			clockShim.err = err
			return
		}
		src := filepath.Join(dir, fmt.Sprintf("fakeclock-%d.c", os.Getpid()))
		if err := os.WriteFile(src, []byte(clockShimC), 0o644); err != nil {
			clockShim.err = err
			return
		}
		defer os.Remove(src)
		tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
		out, err := exec.Command(gcc, "-shared", "-fPIC", "-O2", "-Wall", "-o", tmp, src).CombinedOutput()
		if err != nil {
			clockShim.err = fmt.Errorf("testserver: compiling the fake clock: %v: %s", err, out)
			return
		}
		if err := os.Chmod(tmp, 0o755); err != nil { // servers may run as another user
			clockShim.err = err
			return
		}
		clockShim.err = os.Rename(tmp, path)
		clockShim.path = path
	})
	return clockShim.path, clockShim.err
}
