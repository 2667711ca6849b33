//go:build !linux

package main

import (
	"os"
	"syscall"
)

// sysProcAttr puts CMD in a process group of its own. Outside Linux there
// is no parent-death signal: if fence itself is killed with SIGKILL, CMD
// goes on running.
func sysProcAttr(ownGroup bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: ownGroup}
}

func isTerminal(f *os.File) bool { return false }
