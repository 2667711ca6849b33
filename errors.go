package fence

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/fencing/fence/internal/kit/tokenrule"
)

// Sentinel errors. Match them with errors.Is; the errors fence returns wrap
// them with the key and the details.
var (
	// ErrHeld: the key is held by another owner. Returned by TryAcquire,
	// and by Acquire when its wait timeout passes. Use errors.As with a
	// *HeldError for the holder.
	ErrHeld = errors.New("fence: key is held")
	// ErrLost: the lease was lost before it was released: the store refused
	// a renewal, the local validity ran out before a renewal succeeded, the
	// session holding it dropped, or the release found that the store no
	// longer held it. Use errors.As with a *LostError for the reason.
	ErrLost = errors.New("fence: lease lost")
	// ErrReleased: the lease was released by its holder. It is the cause of
	// a released lease's context, and what a second Release returns.
	ErrReleased = errors.New("fence: lease released")
	// ErrNotHeld: the store does not hold the key for this owner (drivers
	// return it from Extend and Release), or the key is free (Inspect).
	ErrNotHeld = errors.New("fence: not held")
	// ErrSkipped: Run in SkipIfHeld mode did not run its function because
	// another owner holds the key. The error also matches ErrHeld.
	ErrSkipped = errors.New("fence: skipped")
	// ErrInvalidKey: the key is empty, too long, not valid UTF-8, or
	// contains a NUL byte.
	ErrInvalidKey = errors.New("fence: invalid key")
	// ErrInvalidTTL: the TTL is not positive, or too short to renew within.
	ErrInvalidTTL = errors.New("fence: invalid ttl")
	// ErrInvalidOption: an option has a value that cannot work.
	ErrInvalidOption = errors.New("fence: invalid option")
	// ErrUnsupported: the store cannot do what was asked (for example
	// Inspect on a driver without an Inspector).
	ErrUnsupported = errors.New("fence: not supported by this store")
	// ErrLimitMismatch: a semaphore was asked for with a limit other than
	// the one its current holders were granted with.
	ErrLimitMismatch = errors.New("fence: semaphore limit mismatch")
	// ErrUnavailable: the store could not answer for a while: a cluster
	// without a leader, the member a client talks to gone, a connection
	// lost. Drivers wrap the errors they know to be passing with it. A
	// waiting Acquire keeps waiting through them, within its wait timeout
	// and context, and if the wait ends while the store is still
	// unavailable its error wraps both; TryAcquire returns it at once.
	ErrUnavailable = errors.New("fence: store unavailable")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("fence: client closed")
	// ErrStale: a guard refused a write whose fencing token is lower than
	// the highest token it has already accepted for the resource.
	ErrStale = errors.New("fence: stale fencing token")
	// ErrInvalidToken: a guard was given a token that no lease can carry
	// (zero or negative).
	ErrInvalidToken = tokenrule.ErrInvalidToken
)

// HeldError reports that a key is held by another owner. It matches
// ErrHeld.
type HeldError struct {
	// Key is the key that was asked for.
	Key string
	// Holder is the current holder where the store tells it; nil if not.
	Holder *Holder
}

func (e *HeldError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "fence: key %q is held", e.Key)
	if h := e.Holder; h != nil {
		if h.Owner != "" {
			fmt.Fprintf(&b, " by %s", h.Owner)
		}
		var details []string
		if host := h.Meta["host"]; host != "" {
			d := "host " + host
			if pid := h.Meta["pid"]; pid != "" {
				d += " pid " + pid
			}
			details = append(details, d)
		}
		if h.Token > 0 {
			details = append(details, fmt.Sprintf("token %d", h.Token))
		}
		if h.ExpiresIn > 0 {
			details = append(details, "expires in "+h.ExpiresIn.Round(time.Millisecond).String())
		}
		if len(details) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(details, ", "))
		}
	}
	return b.String()
}

// Is reports whether target is ErrHeld.
func (e *HeldError) Is(target error) bool { return target == ErrHeld }

// LossReason says why a lease was lost.
type LossReason string

// The reasons a lease can be lost.
const (
	// LossRefused: the store refused a renewal or release: it no longer
	// holds the key for this owner (it expired there, or was deleted or
	// taken over behind the holder's back).
	LossRefused LossReason = "refused"
	// LossExpired: the local validity ran out before a renewal succeeded,
	// typically because the store was unreachable or slow.
	LossExpired LossReason = "expired"
	// LossSession: the connection or session that held the lease dropped.
	LossSession LossReason = "session"
)

// LostError reports that a lease was lost. It matches ErrLost and unwraps
// to the underlying error, if any.
type LostError struct {
	Key    string
	Token  int64
	Reason LossReason
	// Err is what the store or driver said, if anything.
	Err error
}

func (e *LostError) Error() string {
	var why string
	switch e.Reason {
	case LossRefused:
		why = "the store no longer holds it for this owner"
	case LossExpired:
		why = "its validity ran out before a renewal succeeded"
	case LossSession:
		why = "the session holding it dropped"
	default:
		why = string(e.Reason)
	}
	s := fmt.Sprintf("fence: lease on %q (token %d) lost: %s", e.Key, e.Token, why)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is reports whether target is ErrLost.
func (e *LostError) Is(target error) bool { return target == ErrLost }

// Unwrap returns the underlying error.
func (e *LostError) Unwrap() error { return e.Err }
