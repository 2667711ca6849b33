package torture

import (
	"golang.org/x/sys/unix"
)

// Now reads CLOCK_MONOTONIC, in nanoseconds. On Linux it is one clock for
// every process of the machine, so the parent and its worker processes
// stamp their events on the same timeline (it stops for no process: a
// worker stopped with SIGSTOP finds it moved on when it resumes).
func Now() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic("torture: CLOCK_MONOTONIC: " + err.Error())
	}
	return ts.Nano()
}

// Operation names in events.
const (
	OpAcquire = "acquire" // a lease acquisition (call, ret)
	OpWrite   = "write"   // a protected write to the register (call, ret)
	OpRead    = "read"    // a read of the register (call, ret)
	OpRelease = "release" // a lease release (call, ret)
	OpLost    = "lost"    // the worker's lease context ended with ErrLost
	OpKill    = "kill"    // the parent killed the worker (SIGKILL)
	OpReady   = "ready"   // the worker has opened the store and the register
	OpExit    = "exit"    // the worker process ended
	OpFault   = "fault"   // the parent started or ended a fault (W < 0)
)

// Phases of an operation.
const (
	Call = "call"
	Ret  = "ret"
)

// Outcomes of operations, in Event.Res.
const (
	ResOK      = "ok"      // acquired, written, read, released
	ResStale   = "stale"   // write refused: stale fencing token
	ResUnknown = "unknown" // write whose effect is not known (timed out, connection lost)
	ResFail    = "fail"    // acquire, read or release that failed
	ResLost    = "lost"    // release of a lease that was lost
)

// Event is one line of a torture history. Workers write them as JSON lines
// on their standard output; the parent adds its own (faults, kills, exits).
type Event struct {
	W     int    `json:"w"`            // worker id; -1 for the parent
	Op    string `json:"op"`           // OpAcquire, ...
	Ph    string `json:"ph,omitempty"` // Call or Ret
	ID    int64  `json:"id,omitempty"` // operation id, unique within the worker
	T     int64  `json:"t"`            // Now() when it happened
	Key   string `json:"key,omitempty"`
	Kind  string `json:"kind,omitempty"` // an acquire's fence.Kind ("semaphore", "read", "write"); empty for a lock
	Token int64  `json:"tok,omitempty"`
	Val   string `json:"val,omitempty"`
	Res   string `json:"res,omitempty"`
	Err   string `json:"err,omitempty"`
	// Valid is, for an acquire's ret, the lease's local validity left when
	// the worker got it (Lease.ValidFor), in nanoseconds; validUnknown
	// where the holder does not say (fence run).
	Valid int64 `json:"valid,omitempty"`
	// Fault describes a fault event ("pause worker 2", "heal").
	Fault string `json:"fault,omitempty"`
	// End marks the end of a fault.
	End bool `json:"end,omitempty"`
	// Loss marks the moment the store lost its state (an empty restart,
	// a wipe).
	Loss bool `json:"loss,omitempty"`
	// PIDs are, in a fence-run worker's events, the processes that hold
	// its lease: fence run's, then its command's (runworker.go).
	PIDs []int `json:"pids,omitempty"`
	// Run is, in an OpRun event, how a fence run ended.
	Run *RunEnd `json:"run,omitempty"`
}
