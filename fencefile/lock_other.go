//go:build unix && !linux

package fencefile

import (
	"os"

	"golang.org/x/sys/unix"
)

// Elsewhere the store uses flock, which belongs to the open file like the
// OFD locks used on Linux. flock cannot test a lock without taking it, so
// isLocked takes a shared lock for an instant: an acquisition that races
// with Inspect or List may then find the key held and retry.

// testsLocks: isLocked takes a lock for an instant.
const testsLocks = false

func flock(f *os.File, how int) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var opErr error
	err = rc.Control(func(fd uintptr) {
		for {
			opErr = unix.Flock(int(fd), how)
			if opErr != unix.EINTR {
				return
			}
		}
	})
	if err != nil {
		return err
	}
	return opErr
}

func tryLock(f *os.File) (bool, error) {
	switch err := flock(f, unix.LOCK_EX|unix.LOCK_NB); err {
	case nil:
		return true, nil
	case unix.EWOULDBLOCK:
		return false, nil
	default:
		return false, os.NewSyscallError("flock", err)
	}
}

func tryLockShared(f *os.File) (bool, error) {
	switch err := flock(f, unix.LOCK_SH|unix.LOCK_NB); err {
	case nil:
		return true, nil
	case unix.EWOULDBLOCK:
		return false, nil
	default:
		return false, os.NewSyscallError("flock", err)
	}
}

func lockWait(f *os.File) error {
	if err := flock(f, unix.LOCK_EX); err != nil {
		return os.NewSyscallError("flock", err)
	}
	return nil
}

func unlock(f *os.File) error {
	if err := flock(f, unix.LOCK_UN); err != nil {
		return os.NewSyscallError("flock", err)
	}
	return nil
}

func isLocked(f *os.File) (bool, error) {
	switch err := flock(f, unix.LOCK_SH|unix.LOCK_NB); err {
	case nil:
		return false, unlock(f)
	case unix.EWOULDBLOCK:
		return true, nil
	default:
		return false, os.NewSyscallError("flock", err)
	}
}

// hasWriter is not used where testsLocks is false.
func hasWriter(f *os.File) (bool, error) { return false, nil }
