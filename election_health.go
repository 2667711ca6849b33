package fence

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Healthy reports whether this candidate's leadership is sound, for a
// liveness probe (fencehttp.ElectionHealth serves it over HTTP). It is
// an error only while this candidate still leads, that is, has a term
// that it has not resigned (Lead's function has not returned, or
// Campaign's caller has not called Resign), although the term's lease is
// no longer valid (lost, or its local validity run out), and that has
// lasted grace or longer. The error matches ErrLost (errors.As finds the
// *LostError). A candidate that leads with a valid lease is healthy, and
// so is one that does not lead: a follower, a candidate still
// campaigning, one between terms, one that released its lease itself.
//
// Such a leader is stuck: fence ended its lease's context at the loss,
// and its work has not stopped in grace; it may be writing beside the
// next leader, which only fencing tokens make harmless. Restarting it is
// the remedy a liveness probe applies. grace is how long the leader's
// work may take to stop once its context has ended.
//
// Healthy answers from this process's own view, without asking the
// store: whether another candidate should lead is the store's decision,
// and a candidate that never wins is not broken.
func (e *Election) Healthy(grace time.Duration) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	l := e.lease
	if l == nil {
		return nil
	}
	cause := l.Err()
	switch {
	case errors.Is(cause, ErrReleased):
		return nil
	case cause == nil && l.ValidFor() > 0:
		return nil
	case cause == nil:
		// Validity ran out and the lease's timer has not yet fired: the
		// process is stalled, or the timer is about to fire.
		cause = &LostError{Key: l.key, Token: l.token, Reason: LossExpired}
	}
	now := time.Now()
	if e.ended.IsZero() {
		e.ended = now
	}
	past := now.Sub(e.ended)
	if past < grace {
		return nil
	}
	return fmt.Errorf("fence: election %q: still leading %v after its term (token %d) ended: %w", e.key, past, l.token, cause)
}

// noteEnd records when l, the term's lease, ends, for Healthy.
func (e *Election) noteEnd(l *Lease) {
	context.AfterFunc(l.Context(), func() {
		e.mu.Lock()
		if e.lease == l && e.ended.IsZero() {
			e.ended = time.Now()
		}
		e.mu.Unlock()
	})
}
