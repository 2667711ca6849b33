// Package deathsig starts child processes that die with their parent.
//
// Linux delivers the parent-death signal (SysProcAttr.Pdeathsig) when the
// thread that forked the child ends, not the process (golang/go#27505),
// and Go may end a thread whose goroutine exits while locked to it. Start
// therefore forks from a goroutine locked to its thread until the child
// has been reaped.
package deathsig

import (
	"os/exec"
	"runtime"
)

// Start starts cmd, whose SysProcAttr should set Pdeathsig, and reaps it
// in the background. It returns once the child has started (or failed to)
// and a channel closed once the child has been reaped; cmd.Wait's result
// is then in cmd.ProcessState. The caller must not call cmd.Wait.
func Start(cmd *exec.Cmd) (exited <-chan struct{}, err error) {
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the child
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(done)
	}()
	return done, <-started
}
