package main

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// sysProcAttr makes CMD die with SIGKILL if fence itself dies, even by
// SIGKILL (the kernel's parent-death signal), so that CMD never goes on
// running without the lease; and, with ownGroup, puts CMD in a process
// group of its own.
func sysProcAttr(ownGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: ownGroup, Pdeathsig: syscall.SIGKILL}
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
