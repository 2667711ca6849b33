package dirwatch

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/fencing/fence/internal/testkit/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// A write to a file match accepts wakes the watcher; one it refuses does
// not; the channel closes when the context ends.
func TestWatch(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := Watch(ctx, dir, unix.IN_CLOSE_WRITE, func(name string) bool { return name == "mine" })
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "other"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Fatal("woken by a file match refuses")
	case <-time.After(200 * time.Millisecond):
	}
	if err := os.WriteFile(filepath.Join(dir, "mine"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("not woken by a write to the file match accepts")
	}
	cancel()
	for range ch {
	}
}

// A watch on something that is not a directory fails: the caller polls.
func TestWatchNotADirectory(t *testing.T) {
	f := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(f, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Watch(context.Background(), f, unix.IN_CLOSE_WRITE, func(string) bool { return true }); err == nil {
		t.Fatal("Watch on a file: no error")
	}
}
