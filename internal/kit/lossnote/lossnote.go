// Package lossnote delivers the loss of a session-bound claim to the
// function the Client registers (fence.SessionClaim's NotifyLost),
// exactly once, whichever comes first: the loss or the registration. A
// loss reported before the function is registered is handed to it then.
//
// A driver's claim embeds a *Note, which gives it NotifyLost, and calls
// Report when its session ends.
package lossnote

import "sync"

// Note is one claim's loss report.
type Note struct {
	mu       sync.Mutex
	f        func(error) // registered function; nil until NotifyLost
	err      error       // the loss, once reported
	reported bool
}

// New returns a Note with nothing reported.
func New() *Note { return &Note{} }

// NotifyLost implements fence.SessionClaim: f is called once with the
// loss, at once if it was reported before.
func (n *Note) NotifyLost(f func(error)) {
	n.mu.Lock()
	n.f = f
	reported, err := n.reported, n.err
	n.mu.Unlock()
	if reported {
		f(err)
	}
}

// Report reports a loss. Only the first report counts; the registered
// function is called with it, or, if none is registered yet, when one is.
// Report calls the function without holding any lock of its own.
func (n *Note) Report(err error) {
	n.mu.Lock()
	if n.reported {
		n.mu.Unlock()
		return
	}
	n.reported, n.err = true, err
	f := n.f
	n.mu.Unlock()
	if f != nil {
		f(err)
	}
}
