package fencefile

import (
	"context"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/fencing/fence"
)

var _ fence.Watcher = (*Store)(nil)

// Watch implements fence.Watcher on Linux with inotify on the store's
// directory: a lock file is closed after writing when its holder releases
// it or exits (the kernel closes a dead holder's files), and replaced when
// it is broken. The same goes for semaphore slot files and reader-writer
// lock files; counter files, written by grants and waiting writers, wake
// nobody. Failed acquisitions only read the file, so waiters do not
// wake each other.
//
// Each Watch holds one inotify instance until ctx ends; where the
// per-user limit on instances is reached, Watch fails and the Client polls.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("fencefile: watch %q: %w", key, os.NewSyscallError("inotify_init1", err))
	}
	const mask = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_CREATE | unix.IN_DELETE | unix.IN_ONLYDIR
	if _, err := unix.InotifyAddWatch(fd, s.dir, mask); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("fencefile: watch %q: %w", key, os.NewSyscallError("inotify_add_watch", err))
	}
	// A non-blocking descriptor goes to the runtime's poller: Read parks
	// the goroutine, and Close wakes it.
	f := os.NewFile(uintptr(fd), "inotify:"+s.dir)
	base := strings.TrimSuffix(fileName(key), lockSuffix)
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
			if concerns(buf[:n], base) {
				select {
				case ch <- struct{}{}:
				default: // a wake-up is already pending
				}
			}
		}
	}()
	return ch, nil
}

// concerns reports whether a buffer of inotify events names a file of the
// key whose lock file name is base+".lock" (its lock, semaphore slot or
// reader-writer lock file), or lost events.
func concerns(buf []byte, base string) bool {
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		start := off + unix.SizeofInotifyEvent
		end := start + int(ev.Len)
		if end > len(buf) {
			return true
		}
		if ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			return true
		}
		evName := buf[start:end]
		for i, c := range evName {
			if c == 0 {
				evName = evName[:i]
				break
			}
		}
		if isWakingFile(string(evName), base) {
			return true
		}
		off = end
	}
	return false
}
