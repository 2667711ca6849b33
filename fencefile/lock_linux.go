package fencefile

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// On Linux the store uses open file description (OFD) locks on the whole
// lock file. Like flock they belong to the open file, not the process (two
// opens in one process exclude each other) and the kernel drops them when
// the last descriptor of the open file closes, so when its process dies.
// Unlike flock they can be tested without being taken (F_OFD_GETLK), so
// Inspect and List never get in the way of an acquisition.

// testsLocks: isLocked tests a lock without taking it.
const testsLocks = true

func ofd(f *os.File, cmd int, typ int16) (unix.Flock_t, error) {
	lk := unix.Flock_t{Type: typ, Whence: io.SeekStart}
	rc, err := f.SyscallConn()
	if err != nil {
		return lk, err
	}
	var opErr error
	err = rc.Control(func(fd uintptr) {
		for {
			opErr = unix.FcntlFlock(fd, cmd, &lk)
			if opErr != unix.EINTR {
				return
			}
		}
	})
	if err != nil {
		return lk, err
	}
	return lk, opErr
}

// tryLock takes an exclusive lock on f without waiting; false if another
// open file holds one. f must be open for writing.
func tryLock(f *os.File) (bool, error) {
	_, err := ofd(f, unix.F_OFD_SETLK, unix.F_WRLCK)
	switch err {
	case nil:
		return true, nil
	case unix.EAGAIN, unix.EACCES:
		return false, nil
	}
	return false, os.NewSyscallError("fcntl F_OFD_SETLK", err)
}

// tryLockShared takes a shared (read) lock on f without waiting; false if
// another open file holds an exclusive one.
func tryLockShared(f *os.File) (bool, error) {
	_, err := ofd(f, unix.F_OFD_SETLK, unix.F_RDLCK)
	switch err {
	case nil:
		return true, nil
	case unix.EAGAIN, unix.EACCES:
		return false, nil
	}
	return false, os.NewSyscallError("fcntl F_OFD_SETLK", err)
}

// lockWait takes an exclusive lock on f, waiting for it. It is used only
// for a kind's counter file, which every holder locks for an instant.
func lockWait(f *os.File) error {
	if _, err := ofd(f, unix.F_OFD_SETLKW, unix.F_WRLCK); err != nil {
		return os.NewSyscallError("fcntl F_OFD_SETLKW", err)
	}
	return nil
}

// unlock drops f's lock.
func unlock(f *os.File) error {
	_, err := ofd(f, unix.F_OFD_SETLK, unix.F_UNLCK)
	if err != nil {
		return os.NewSyscallError("fcntl F_OFD_SETLK", err)
	}
	return nil
}

// isLocked reports whether another open file holds a lock on f, without
// taking one.
func isLocked(f *os.File) (bool, error) {
	lk, err := ofd(f, unix.F_OFD_GETLK, unix.F_WRLCK)
	if err != nil {
		return false, os.NewSyscallError("fcntl F_OFD_GETLK", err)
	}
	return lk.Type != unix.F_UNLCK, nil
}

// hasWriter reports whether another open file holds an exclusive lock on
// f, without taking one.
func hasWriter(f *os.File) (bool, error) {
	lk, err := ofd(f, unix.F_OFD_GETLK, unix.F_RDLCK)
	if err != nil {
		return false, os.NewSyscallError("fcntl F_OFD_GETLK", err)
	}
	return lk.Type != unix.F_UNLCK, nil
}
