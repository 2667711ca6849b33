package dirwatch

import (
	"context"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Watch watches dir for the inotify events in mask (IN_ONLYDIR is added)
// and sends on the returned channel whenever a batch of events names a
// file for which match is true, or events were lost; sends coalesce (the
// channel holds one). The channel is closed when ctx ends. Each Watch
// holds one inotify instance until then; where the per-user limit on
// instances is reached, Watch fails, and the caller polls.
func Watch(ctx context.Context, dir string, mask uint32, match func(name string) bool) (<-chan struct{}, error) {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("inotify_init1", err)
	}
	if _, err := unix.InotifyAddWatch(fd, dir, mask|unix.IN_ONLYDIR); err != nil {
		unix.Close(fd)
		return nil, os.NewSyscallError("inotify_add_watch", err)
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
			if concerns(buf[:n], match) {
				select {
				case ch <- struct{}{}:
				default: // a wake-up is already pending
				}
			}
		}
	}()
	return ch, nil
}

// concerns reports whether a buffer of inotify events names a file match
// accepts, or lost events.
func concerns(buf []byte, match func(name string) bool) bool {
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		start := off + unix.SizeofInotifyEvent
		end := start + int(ev.Len)
		if end > len(buf) || ev.Mask&unix.IN_Q_OVERFLOW != 0 {
			return true
		}
		name := buf[start:end]
		for i, c := range name {
			if c == 0 {
				name = name[:i]
				break
			}
		}
		if match(string(name)) {
			return true
		}
		off = end
	}
	return false
}
