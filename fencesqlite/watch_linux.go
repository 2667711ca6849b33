package fencesqlite

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fencing/fence"
)

var _ fence.Watcher = (*Store)(nil)

// Watch implements fence.Watcher on Linux with inotify on the database's
// directory: every commit that changes the database appends to its -wal
// file, so a write to that file may be a release. It wakes on any change
// of the file, not only of key (a release, but also an acquisition or a
// renewal of any key): a waiter then makes one attempt, a transaction that
// changes nothing and so writes nothing, so waiters do not wake each
// other. A change that reaches the main file without the -wal (no WAL
// yet: another program's) wakes nobody; the Client still polls, at its
// slowest rate, behind a watch.
//
// Each Watch holds one inotify instance until ctx ends; where the
// per-user limit on instances is reached, Watch fails and the Client
// polls.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fencesqlite: watch %q: %w", key, os.NewSyscallError("inotify_init1", err))
	}
	dir, wal := filepath.Dir(s.path), filepath.Base(s.path)+"-wal"
	const mask = unix.IN_MODIFY | unix.IN_CREATE | unix.IN_ONLYDIR
	if _, err := unix.InotifyAddWatch(fd, dir, mask); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("fencesqlite: watch %q: %w", key, os.NewSyscallError("inotify_add_watch", err))
	}
	// A non-blocking descriptor goes to the runtime's poller: Read parks
	// the goroutine, and Close wakes it.
	f := os.NewFile(uintptr(fd), "inotify:"+dir)
	ch := make(chan struct{}, 1)
	stop := context.AfterFunc(ctx, func() { f.Close() })
	go func() {
		defer close(ch)
		defer stop()
		buf := make([]byte, 16<<10)
		for {
			n, err := f.Read(buf)
			if err != nil {
				return
			}
			if names(buf[:n], wal) {
				select {
				case ch <- struct{}{}:
				default: // a wake-up is already pending
				}
			}
		}
	}()
	return ch, nil
}

// names reports whether a buffer of inotify events names the file name,
// or lost events.
func names(buf []byte, name string) bool {
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		start := off + unix.SizeofInotifyEvent
		end := start + int(ev.Len)
		if end > len(buf) || ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			return true
		}
		evName := buf[start:end]
		for i, c := range evName {
			if c == 0 {
				evName = evName[:i]
				break
			}
		}
		if string(evName) == name {
			return true
		}
		off = end
	}
	return false
}
