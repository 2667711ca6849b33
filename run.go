package fence

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Run acquires key, runs fn under the lease and releases the lease when fn
// returns. fn's context ends when the lease is lost or ctx ends; fn must
// stop its work then, and should send l.Token() with every write to the
// protected resource.
//
// Run returns fn's error, joined with the lease's loss if the lease was
// lost at any moment between its grant and its release, however that was
// found: while fn ran (fn's context then ended with the *LostError as its
// cause), during the HoldAtLeast wait, or only by the release, when the
// store no longer held the lease. Such a Run never returns nil: its error
// matches ErrLost (errors.As finds the *LostError), because fn's work may
// have overlapped another holder's, which is what fencing tokens make
// harmless. A release that fails for another reason (the store
// unreachable) is joined too. fn may release the lease itself; that is no
// error, unless the release found the lease lost.
//
// With SkipIfHeld, Run does not wait for a held key: it returns an error
// matching ErrSkipped (and ErrHeld, with the holder) without calling fn.
// With HoldAtLeast, it keeps the lease after fn returns until that long
// after the acquisition. SkipIfHeld and WithWait together are refused
// (ErrInvalidOption): a Run that skips never waits.
func (c *Client) Run(ctx context.Context, key string, fn func(ctx context.Context, l *Lease) error, opts ...RunOption) error {
	return c.run(ctx, target{key: key}, runConfig(c.cfg, opts, "Run"), fn)
}

// runConfig is the config of a Run, named call: cfg with opts applied,
// refusing WithWait beside SkipIfHeld.
func runConfig(cfg *config, opts []RunOption, call string) *config {
	cfg = with(cfg, opts)
	if given(opts, "SkipIfHeld") {
		cfg = refuse(cfg, opts, "WithWait", call+" with SkipIfHeld", "never waits")
	}
	return cfg
}

func (c *Client) run(ctx context.Context, tgt target, cfg *config, fn func(ctx context.Context, l *Lease) error) error {
	l, err := c.acquire(ctx, tgt, cfg, !cfg.skipIfHeld)
	if err != nil {
		if cfg.skipIfHeld && errors.Is(err, ErrHeld) {
			return fmt.Errorf("%w: %w", ErrSkipped, err)
		}
		return err
	}
	return runHeld(ctx, l, cfg, fn)
}

// runHeld runs fn under the held lease l and releases it.
func runHeld(ctx context.Context, l *Lease, cfg *config, fn func(ctx context.Context, l *Lease) error) error {
	runCtx, cancel := context.WithCancelCause(l.Context())
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	err := fn(runCtx, l)
	stop()
	cancel(nil)

	if hold := time.Until(l.AcquiredAt().Add(cfg.holdAtLeast)); hold > 0 && l.Err() == nil {
		t := time.NewTimer(hold)
		select {
		case <-t.C:
		case <-l.Done():
		case <-ctx.Done():
		}
		t.Stop()
	}

	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ttl)
	defer rcancel()
	// Release reports every loss: one found earlier (the lease's cause) as
	// well as one it finds itself.
	return withRelease(err, l.Release(rctx))
}

// withRelease joins fn's error err and what releasing its lease returned:
// a loss (unless err already carries that very *LostError, as when fn
// returned its context's cause) or a failure; a lease that fn released
// itself adds nothing.
func withRelease(err, rerr error) error {
	var lost *LostError
	switch {
	case rerr == nil, errors.Is(rerr, ErrReleased):
		return err
	case errors.As(rerr, &lost) && errors.Is(err, lost):
		return err
	}
	return errors.Join(err, rerr)
}
