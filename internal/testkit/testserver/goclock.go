package testserver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// A Go program reads the wall clock through the kernel's vDSO, not the C
// library, so the preloaded clockShimC cannot move it. For a Go server
// built from source (nats-server: scripts/test installs it with go
// install), goClockTime is added to the standard library's time package
// of a second build, through the go command's -overlay: time.Now adds
// the same shared offset (FENCE_FAKE_CLOCK) to the wall reading, and
// leaves the monotonic one alone, as the C shim does.
const goClockTime = `package time

import (
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Added by fence's internal/testkit/testserver (goclock.go) to a build of
// a server that runs on a FakeClock.

var (
	fakeClockOnce   sync.Once
	fakeClockOffset *int64
)

// fakeClockNow is runtimeNow with the wall reading moved by the offset,
// in nanoseconds, in the 8-byte file named by FENCE_FAKE_CLOCK, mapped
// shared and read atomically on every call.
func fakeClockNow() (sec int64, nsec int32, mono int64) {
	sec, nsec, mono = runtimeNow()
	fakeClockOnce.Do(func() {
		path, ok := syscall.Getenv("FENCE_FAKE_CLOCK")
		if !ok {
			return
		}
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return
		}
		m, err := syscall.Mmap(fd, 0, 8, syscall.PROT_READ, syscall.MAP_SHARED)
		syscall.Close(fd)
		if err == nil {
			fakeClockOffset = (*int64)(unsafe.Pointer(&m[0]))
		}
	})
	if fakeClockOffset == nil {
		return sec, nsec, mono
	}
	ns := sec*1e9 + int64(nsec) + atomic.LoadInt64(fakeClockOffset)
	return ns / 1e9, int32(ns % 1e9), mono
}
`

// goClockNowLine is the line of the time package's Now that reads the
// clock; the overlay's copy of time.go calls fakeClockNow instead.
const goClockNowLine = "\tsec, nsec, mono := runtimeNow()\n"

var goClockBuilds sync.Map // "module@version" -> *goClockBuild

type goClockBuild struct {
	once sync.Once
	path string
	err  error
}

// goClockBinary returns a build of the Go command pkg@version (go install's
// form, its binary named bin) whose time.Now reads a FakeClock, building
// it once into goClockCache, named by the version, the Go toolchain and
// the overlay's sources. It needs the go command and the module
// proxy.
func goClockBinary(pkg, version, bin string) (string, error) {
	v, _ := goClockBuilds.LoadOrStore(pkg+"@"+version, &goClockBuild{})
	b := v.(*goClockBuild)
	b.once.Do(func() { b.path, b.err = buildGoClock(pkg, version, bin) })
	return b.path, b.err
}

// goClockCache is where fake-clock builds are kept: RepoRoot()/.tools,
// with scripts/test's other builds (kept between CI runs), or else the
// user's cache.
func goClockCache() string {
	if root := RepoRoot(); root != "" {
		return filepath.Join(root, ".tools", "fakeclock")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		cache = os.TempDir()
	}
	return filepath.Join(cache, "fence-testserver")
}

func buildGoClock(pkg, version, bin string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("building %s on a fake clock: %w", bin, err)
	}
	out, err := exec.Command(goBin, "env", "GOROOT", "GOVERSION").Output()
	if err != nil {
		return "", fmt.Errorf("go env: %w", err)
	}
	env := strings.Fields(string(out))
	if len(env) != 2 {
		return "", fmt.Errorf("go env GOROOT GOVERSION: %q", out)
	}
	goroot, goversion := env[0], env[1]
	timeGo := filepath.Join(goroot, "src", "time", "time.go")
	orig, err := os.ReadFile(timeGo)
	if err != nil {
		return "", err
	}
	if strings.Count(string(orig), goClockNowLine) != 1 {
		return "", fmt.Errorf("building %s on a fake clock: %s of %s does not read the clock in one line %q as expected", bin, timeGo, goversion, strings.TrimSpace(goClockNowLine))
	}
	patched := strings.Replace(string(orig), goClockNowLine, "\tsec, nsec, mono := fakeClockNow()\n", 1)
	sum := sha256.Sum256([]byte(pkg + "@" + version + "\x00" + goversion + "\x00" + patched + "\x00" + goClockTime))
	dir := filepath.Join(goClockCache(), bin+"-fakeclock-"+hex.EncodeToString(sum[:8]))
	path := filepath.Join(dir, bin)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), bin+"-fakeclock-build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	// The overlay replaces time.go and adds a file to the package.
	replace := map[string]string{}
	for _, f := range []struct{ name, src string }{
		{"time.go", patched},
		{"zz_fencefakeclock.go", goClockTime},
	} {
		p := filepath.Join(tmp, f.name)
		if err := os.WriteFile(p, []byte(f.src), 0o644); err != nil {
			return "", err
		}
		replace[filepath.Join(goroot, "src", "time", f.name)] = p
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": replace})
	if err := os.WriteFile(filepath.Join(tmp, "overlay.json"), overlay, 0o644); err != nil {
		return "", err
	}
	gobin := filepath.Join(tmp, "bin")
	cmd := exec.Command(goBin, "install", "-overlay", filepath.Join(tmp, "overlay.json"), pkg+"@"+version)
	cmd.Env = append(os.Environ(), "GOBIN="+gobin, "GOFLAGS=", "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s@%s on a fake clock: %v: %s", pkg, version, err, out)
	}
	if err := os.Chmod(gobin, 0o755); err != nil { // servers may run as another user
		return "", err
	}
	if err := os.Rename(gobin, dir); err != nil {
		if _, statErr := os.Stat(path); statErr == nil {
			return path, nil // another test binary built it meanwhile
		}
		return "", err
	}
	return path, nil
}
