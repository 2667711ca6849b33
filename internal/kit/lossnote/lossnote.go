// Package lossnote delivers the loss of a session-bound claim: on the
// claim's Lost channel (fence.SessionClaim) until the Client registers a
// function (fence.LossNotifier), to that function afterwards. A loss
// reported before the function was registered is handed to it then, so
// none is missed, whatever the order.
//
// A driver's claim embeds a *Note, which gives it Lost and NotifyLost, and
// calls Report when its session ends.
package lossnote

import "sync/atomic"

// Note is one claim's loss report.
type Note struct {
	lost   chan error
	notify atomic.Pointer[func(error)]
}

// New returns a Note with nothing reported.
func New() *Note { return &Note{lost: make(chan error, 1)} }

// Lost implements fence.SessionClaim's Lost.
func (n *Note) Lost() <-chan error { return n.lost }

// NotifyLost implements fence.LossNotifier: f is called with the loss,
// including one reported before.
func (n *Note) NotifyLost(f func(error)) {
	n.notify.Store(&f)
	select {
	case err := <-n.lost:
		f(err)
	default:
	}
}

// Report reports a loss: to the registered function, else on Lost (where
// only the first of several is kept).
func (n *Note) Report(err error) {
	if f := n.notify.Load(); f != nil {
		(*f)(err)
		return
	}
	select {
	case n.lost <- err:
	default:
	}
	if f := n.notify.Load(); f != nil { // registered meanwhile: hand it over
		select {
		case err := <-n.lost:
			(*f)(err)
		default:
		}
	}
}
