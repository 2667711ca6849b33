// Package unavail marks a store's errors that say it could not answer for
// now with fence.ErrUnavailable, so that a waiting Acquire waits through
// them within its wait budget (docs/leases.md) instead of failing at once.
//
// Each driver says which of its store's own errors are such (a cluster
// without a leader, a server loading its data, a request timed out in the
// store); Network recognises those every client shares: a connection
// refused, reset or closed mid-request, an I/O timeout. A driver marks
// the errors its acquisitions return with Mark.
package unavail

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/fencing/fence"
)

// Mark returns err marked with fence.ErrUnavailable if the network or the
// store could not answer: Network(err), or store(err) for a non-nil
// store. Any other error, nil included, comes back unchanged, and so does
// one that is marked already, and one that is nothing but the store's
// answer (answer). The mark keeps err's message and its chain.
func Mark(err error, store func(error) bool) error {
	if err == nil || answer(err) || errors.Is(err, fence.ErrUnavailable) {
		return err
	}
	if Network(err) || store != nil && store(err) {
		return &marked{err}
	}
	return err
}

// answer reports whether err is the store's answer and nothing else: a
// chain of single wraps that ends at a fence.HeldError, fence.ErrHeld or
// fence.ErrNotHeld. Such an error is never unavailability, and the store
// predicates, which read an error's message, are not asked: every waiter
// that loses a race for a released key gets a HeldError, whose message
// is formatted anew on every call. An error that joins an answer with
// anything else (a Redlock's servers that answered differently) is not
// one, and is judged whole.
func answer(err error) bool {
	for err != nil {
		if _, ok := err.(*fence.HeldError); ok || err == fence.ErrHeld || err == fence.ErrNotHeld {
			return true
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return false
		}
		err = u.Unwrap()
	}
	return false
}

// MarkLive is Mark for an acquisition made under ctx: an error once ctx
// has ended is the end of the caller's wait, and stays as it is.
func MarkLive(ctx context.Context, err error, store func(error) bool) error {
	if err == nil || ctx.Err() != nil {
		return err
	}
	return Mark(err, store)
}

// Network reports whether err says the connection to the store failed or
// timed out: the store may answer again. An error the caller's own
// context ended, or a client closed by its user, is not one.
func Network(err error) bool {
	if errors.Is(err, net.ErrClosed) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // this side closed it, or its context ended
	}
	for _, e := range []error{io.EOF, io.ErrUnexpectedEOF, os.ErrDeadlineExceeded,
		syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ETIMEDOUT} {
		if errors.Is(err, e) {
			return true
		}
	}
	var op *net.OpError
	if errors.As(err, &op) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

type marked struct{ err error }

func (m *marked) Error() string   { return m.err.Error() }
func (m *marked) Unwrap() []error { return []error{fence.ErrUnavailable, m.err} }
