package fence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Election is leader election over one key: the leader is whoever holds
// the key's lease, and the lease's token orders the terms, so a resource
// guarded by tokens refuses writes from a deposed leader.
type Election struct {
	c    *Client
	key  string
	opts []AcquireOption

	mu    sync.Mutex
	lease *Lease
	// ended is when the term's lease stopped being valid, as first seen
	// (its context ending, or Healthy finding its validity run out);
	// zero while it is valid.
	ended time.Time
}

// Election returns a candidate for leadership of key. The options apply to
// every campaign.
func (c *Client) Election(key string, opts ...AcquireOption) *Election {
	return &Election{c: c, key: key, opts: opts}
}

// Campaign waits until this candidate leads (or ctx ends, or the wait
// timeout passes) and returns the leadership's lease. Leadership ends when
// the lease is lost or on Resign.
func (e *Election) Campaign(ctx context.Context) (*Lease, error) {
	e.mu.Lock()
	if e.lease != nil && e.lease.Err() == nil {
		e.mu.Unlock()
		return nil, fmt.Errorf("%w: already leading %q; Resign first", ErrInvalidOption, e.key)
	}
	e.mu.Unlock()
	l, err := e.c.Acquire(ctx, e.key, e.opts...)
	if err != nil {
		return nil, err
	}
	e.mu.Lock()
	e.lease, e.ended = l, time.Time{}
	e.mu.Unlock()
	e.noteEnd(l)
	return l, nil
}

// Resign gives up leadership, if this candidate leads; it is a no-op
// otherwise. It releases the leadership's lease, so it reports what that
// release reports: if the leadership was lost, whether the loss was found
// before (the lease's context ended with a *LostError) or by this resign
// (the store no longer held the lease), Resign returns the *LostError
// (ErrLost), never nil: the leader's work may have overlapped a
// successor's. A failed release (the store unreachable) is returned too.
func (e *Election) Resign(ctx context.Context) error {
	e.mu.Lock()
	l := e.lease
	e.lease = nil
	e.mu.Unlock()
	if l == nil {
		return nil
	}
	if err := l.Release(ctx); err != nil && !errors.Is(err, ErrReleased) {
		return err
	}
	return nil
}

// Lead campaigns, runs fn while leading, and resigns when fn returns. fn's
// context ends when leadership is lost or ctx ends.
//
// What Lead returns:
//   - fn returned and the resign released the leadership: fn's error (nil
//     if fn returned nil).
//   - fn returned and the resign found the leadership lost (the store no
//     longer held it): fn's error joined with the *LostError, which
//     matches ErrLost. Lead never returns nil for a leadership that ended
//     by loss.
//   - leadership was lost while fn ran (fn's context ended with a
//     *LostError as its cause; fence logs the loss): Lead drops fn's error,
//     resigns and campaigns again, and fn runs again under the next term,
//     whose token is greater. fn learns of every such loss through its
//     context.
//   - ctx ended: an error wrapping ctx's cause, joined with the
//     *LostError if the leadership was lost, and with the resign's error
//     if it failed.
//   - a campaign failed: its error.
//
// A resign that fails for another reason (the store unreachable) is
// joined to what Lead returns in the first two cases.
func (e *Election) Lead(ctx context.Context, fn func(ctx context.Context, l *Lease) error) error {
	for {
		l, err := e.Campaign(ctx)
		if err != nil {
			return err
		}
		runCtx, cancel := context.WithCancelCause(l.Context())
		stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
		err = fn(runCtx, l)
		stop()
		deposed := errors.Is(context.Cause(runCtx), ErrLost)
		cancel(nil)
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), l.TTL())
		rerr := e.Resign(rctx)
		rcancel()
		switch {
		case ctx.Err() != nil:
			return withRelease(fmt.Errorf("fence: lead %q: %w", e.key, context.Cause(ctx)), rerr)
		case deposed:
			continue // campaign again
		default:
			return withRelease(err, rerr)
		}
	}
}

// Leader returns the current leader. The error matches ErrNotHeld if there
// is none, and ErrUnsupported if the store cannot tell.
func (e *Election) Leader(ctx context.Context) (Holder, error) {
	return e.c.Inspect(ctx, e.key)
}

// Observe reports the leader each time it changes, starting with the
// current one (a zero Holder while there is none), until ctx ends; then
// the channel is closed. It uses the store's notifications where there are
// any and polls otherwise. It needs a store that can Inspect.
func (e *Election) Observe(ctx context.Context) (<-chan Holder, error) {
	in, ok := e.c.drv.(Inspector)
	if !ok {
		return nil, fmt.Errorf("%w: observe %q", ErrUnsupported, e.key)
	}
	if err := ValidateKey(e.key); err != nil {
		return nil, err
	}
	var notify <-chan struct{}
	if w, ok := e.c.drv.(Watcher); ok {
		if ch, err := w.Watch(ctx, e.key); err == nil {
			notify = ch
		}
	}
	poll := min(with(e.c.cfg, e.opts).ttl/3, maxPoll)
	out := make(chan Holder)
	go func() {
		defer close(out)
		var last Holder
		first := true
		t := time.NewTimer(0)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-notify:
				if !ok {
					notify = nil
				}
			case <-t.C:
			}
			h, err := in.Inspect(ctx, e.key)
			if err != nil && !errors.Is(err, ErrNotHeld) {
				t.Reset(poll)
				continue
			}
			if err != nil {
				h = Holder{}
			}
			if first || h.Owner != last.Owner || h.Token != last.Token {
				first = false
				last = h
				select {
				case out <- h:
				case <-ctx.Done():
					return
				}
			}
			if h.ExpiresIn > 0 && h.ExpiresIn < poll {
				t.Reset(h.ExpiresIn + time.Millisecond)
			} else {
				t.Reset(poll)
			}
		}
	}()
	return out, nil
}
