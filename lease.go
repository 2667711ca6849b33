package fence

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Lease is a held lock: a key, an owner id and a fencing token, valid until
// it is released or lost. Send Token with every write to the protected
// resource and let the resource refuse tokens lower than one it has
// already seen (see the guards): that, not the lease, is what makes a
// paused or partitioned old holder harmless.
//
// While the lease is held, fence renews it (unless WithoutRenewal). The
// lease is lost, and its context cancelled at once, when the store refuses
// a renewal, when the local validity runs out before a renewal succeeds,
// or when the session holding it drops. Local validity is measured on this
// machine's monotonic clock from the moment each acquire or renew request
// was sent, minus the drift margin; no other machine's clock is trusted.
//
// A Lease is safe for concurrent use.
type Lease struct {
	// The fields a renewal in a batch reads and writes come first, in
	// as few cache lines as they fit: a Client holding thousands of
	// leases renews each from a cold cache.
	c     *Client
	cfg   *config // the Client's, or the call's if its options changed it; never changed
	claim Claim

	claimMu   sync.Mutex // serializes calls on claim
	claimDone bool       // claim.Release was called; guarded by claimMu

	mu         sync.Mutex
	validUntil time.Time
	ended      bool // lost or released
	// Renewals run from the Client's schedule (renewTick), which costs
	// no goroutine while the lease waits; renewRunning and renewIdle,
	// guarded by mu, let Release wait for a renewal in progress. A
	// session-bound lease learns of its session's loss from its driver
	// (SessionClaim.NotifyLost), which costs no goroutine here either.
	renewRunning bool
	renewIdle    chan struct{} // closed when the running renewal ends; nil if none waits
	inBatch      *batchRun     // the batch renewing the lease now, if any (batch.go)
	expiry       *event        // when validUntil comes, on c.sched, unless expiryIn
	// The cohorts (batch.go) whose deadlines are the end of the lease's
	// validity and its next renewal, if any; guarded by c.sched.mu.
	expiryIn, renewIn *cohort

	key      string
	owner    string
	token    int64
	acquired time.Time

	ctx    context.Context
	cancel context.CancelCauseFunc

	expiryEv event // expiry points here once scheduled
	renewEv  event

	released releasedError // the cause of a released lease, kept here to spare an allocation
	// lostAtRelease is the loss that Release found (the store no longer
	// held the lease), returned again by later Releases; guarded by mu.
	lostAtRelease *LostError
}

func newLease(c *Client, cfg *config, req Request, claim Claim, validUntil, now time.Time, ctx context.Context) *Lease {
	l := &Lease{
		c:          c,
		cfg:        cfg,
		key:        req.Key,
		owner:      req.Owner,
		token:      claim.Token(),
		claim:      claim,
		acquired:   now,
		validUntil: validUntil,
	}
	l.ctx, l.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	return l
}

// start schedules the end of the lease's validity and, unless
// WithoutRenewal, its first renewal; a session-bound lease also registers
// for its session's loss. now is the time of the grant.
func (l *Lease) start(now time.Time) {
	l.mu.Lock()
	l.expiryEv = event{lease: l, index: -1}
	l.renewEv = event{lease: l, renew: true, batched: l.c.batchable(l.claim), index: -1}
	l.expiry = &l.expiryEv
	l.c.sched.put(l.expiry, l.validUntil)
	if !l.cfg.noRenew {
		// A grant whose reply was slow has less validity left than the
		// interval assumes: renew no later than an interval before it ends.
		at := now.Add(l.cfg.renewInterval())
		if last := l.validUntil.Add(-l.cfg.renewInterval()); last.Before(at) {
			at = last
		}
		l.c.sched.put(&l.renewEv, at)
	}
	l.mu.Unlock()
	if sc, ok := l.claim.(SessionClaim); ok {
		// Outside l.mu: the driver may call the function at once.
		sc.NotifyLost(func(err error) { l.lose(LossSession, err) })
	}
}

// renewTick is one scheduled renewal: it renews, then schedules the next,
// until the lease ends.
func (l *Lease) renewTick() {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	l.renewRunning = true
	l.mu.Unlock()

	next, ok := l.renewOnce(l.cfg.renewInterval())
	l.renewDone(next, ok, nil)
}

// renewDone ends a running renewal, which asks for the next one after
// next if ok: it lets a waiting Release go on, or schedules the next
// renewal: c's, if c is not nil (a batch renewed the lease, and next is
// its interval), else one of its own.
func (l *Lease) renewDone(next time.Duration, ok bool, c *cohort) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.renewRunning = false
	l.inBatch = nil
	if l.renewIdle != nil {
		close(l.renewIdle)
		l.renewIdle = nil
	}
	switch {
	case !ok || l.ended:
	case c != nil:
		l.c.sched.renewInCohort(l, c)
	default:
		l.c.sched.put(&l.renewEv, time.Now().Add(next))
	}
}

// unscheduleLocked removes the lease's deadlines from the schedule; l.mu
// is held and l.ended set, so no renewal starts after it. A batch that
// renews the lease now learns that it ended (batch.go).
func (l *Lease) unscheduleLocked() {
	l.c.sched.dropLease(l)
	if l.inBatch != nil {
		l.inBatch.leave()
		l.inBatch = nil
	}
}

// waitRenewals returns once no renewal of the ended lease runs any more.
func (l *Lease) waitRenewals() {
	l.mu.Lock()
	if !l.renewRunning {
		l.mu.Unlock()
		return
	}
	if l.renewIdle == nil {
		l.renewIdle = make(chan struct{})
	}
	idle := l.renewIdle
	l.mu.Unlock()
	<-idle
}

// Key returns the lease's key.
func (l *Lease) Key() string { return l.key }

// Owner returns the owner id of this acquisition, unique and unguessable.
func (l *Lease) Owner() string { return l.owner }

// Token returns the fencing token: greater than every token issued before
// for this key. Send it with every write to the protected resource.
func (l *Lease) Token() int64 { return l.token }

// TTL returns the lease's time-to-live in the store.
func (l *Lease) TTL() time.Duration { return l.cfg.ttl }

// AcquiredAt returns when the lease was granted, on this machine's clock.
func (l *Lease) AcquiredAt() time.Time { return l.acquired }

// Context returns a context that is cancelled the moment the lease is lost
// or released; context.Cause tells which (a *LostError or ErrReleased). It
// carries the values of the context given to Acquire, not its
// cancellation. Do the lease's work under this context.
func (l *Lease) Context() context.Context { return l.ctx }

// Done returns a channel that is closed when the lease is lost or released.
func (l *Lease) Done() <-chan struct{} { return l.ctx.Done() }

// Err returns nil while the lease is held, a *LostError (matching ErrLost)
// once it is lost, and an error matching ErrReleased once it is released.
//
// Err reads the clock itself: once the lease's validity has run out, it
// reports the loss (and cancels the lease's context) even if the timer
// that ends the validity has not run yet, as after a process was paused
// (a long GC pause, SIGSTOP, a frozen VM) and has just resumed.
func (l *Lease) Err() error {
	if l.ctx.Err() == nil {
		l.expire()
		if l.ctx.Err() == nil {
			return nil
		}
	}
	return context.Cause(l.ctx)
}

// ValidFor returns how long the lease stays valid locally if no renewal
// succeeds from now on; 0 once it is lost or released.
func (l *Lease) ValidFor() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return 0
	}
	return max(0, time.Until(l.validUntil))
}

// Renew extends the lease now. Automatic renewal does this on its own;
// Renew is for leases taken WithoutRenewal, or to extend before a long
// step. If the store refuses, the lease is lost and the *LostError
// returned.
func (l *Lease) Renew(ctx context.Context) error {
	if err := l.Err(); err != nil {
		return err
	}
	l.mu.Lock()
	deadline := l.validUntil
	l.mu.Unlock()
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	sent := time.Now()
	err := l.extend(ctx)
	l.observeRenewal(ctx, err, sent, false)
	if err == nil {
		l.extendValidity(sent, nil)
		return l.Err()
	}
	if errors.Is(err, ErrNotHeld) {
		l.lose(LossRefused, err)
		return l.Err()
	}
	if lerr := l.Err(); lerr != nil {
		return lerr
	}
	return fmt.Errorf("fence: renew %q (token %d): %w", l.key, l.token, err)
}

// Release ends the lease: it cancels the lease's context first, so work
// under it stops, then deletes the lease in the store only if the store
// still holds it for this owner (compare-and-delete). Release never
// removes another owner's lease. ctx may be the lease's own context, or
// one made from it: the store call then runs without the cancellation
// that Release itself causes, bounded by the TTL.
//
// Release returns a *LostError (ErrLost) if the lease was lost: lost
// before (its context's cause), or found lost by this release, when the
// store no longer held it for this owner. The work done under the lease
// may then have overlapped another holder's, so such a release is no
// success; fence logs the loss as it logs every other. A later Release
// of a lease found lost returns the same *LostError; one of a lease
// released without loss returns an error matching ErrReleased. (The
// context's cause, and Err, stay ErrReleased for a loss found by the
// release: the context ends before the store is asked.) All of these
// are harmless to other holders.
func (l *Lease) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.ended {
		lostAtRelease := l.lostAtRelease
		l.mu.Unlock()
		l.waitRenewals()
		l.c.forget(l)
		if lostAtRelease != nil {
			return lostAtRelease
		}
		cause := l.Err()
		var lost *LostError
		if errors.As(cause, &lost) && lost.Reason == LossExpired {
			// Unreachable or slow store: the key may still be ours there.
			// Deleting it (compare-and-delete) frees it for others sooner.
			ctx, cancel := l.releaseContext(ctx)
			_ = l.releaseClaim(ctx)
			cancel()
		}
		return cause
	}
	l.ended = true
	l.unscheduleLocked()
	l.released = releasedError{lease: l}
	l.cancel(&l.released)
	l.mu.Unlock()

	l.waitRenewals()
	var start time.Time // read only by observers
	if l.c.observer != nil {
		start = time.Now()
	}
	ctx, cancel := l.releaseContext(ctx)
	defer cancel()
	err := l.releaseClaim(ctx)
	var lost *LostError
	switch {
	case err == nil:
	case errors.Is(err, ErrNotHeld):
		// The store had already let the lease go behind our back: a loss,
		// found only now, and as loud as one found by a renewal.
		lost = &LostError{Key: l.key, Token: l.token, Reason: LossRefused, Err: err}
		l.mu.Lock()
		l.lostAtRelease = lost
		l.mu.Unlock()
		l.cfg.logger.Error("fence: lease lost", "key", l.key, "token", l.token, "reason", string(lost.Reason),
			"found_by", "release", "err", err)
		err = lost
	default:
		err = fmt.Errorf("fence: release %q (token %d): %w", l.key, l.token, err)
	}
	var reason LossReason
	if lost != nil {
		reason = lost.Reason
	}
	now := time.Now()
	held := now.Sub(l.acquired)
	if o := l.c.observer; o != nil {
		var lossErr error
		if lost != nil {
			lossErr = lost.Err
		}
		o.LeaseEnded(ctx, LeaseEnded{Store: l.c.store, Key: l.key, Owner: l.owner, Token: l.token, Held: held,
			Reason: reason, Err: lossErr})
		o.Released(ctx, Released{Store: l.c.store, Key: l.key, Owner: l.owner, Token: l.token,
			Outcome: releaseOutcome(err), Err: err, Start: start, Duration: now.Sub(start), TTL: l.cfg.ttl, Held: held})
	}
	l.c.overruns.released(l, held, l.c.store)
	return err
}

// observeRenewal reports a renewal attempt sent at sent to the Client's
// observer.
func (l *Lease) observeRenewal(ctx context.Context, err error, sent time.Time, late bool) {
	if o := l.c.observer; o != nil {
		o.Renewed(ctx, Renewed{Store: l.c.store, Key: l.key, Owner: l.owner, Token: l.token,
			Outcome: renewOutcome(err), Err: err, Start: sent, Duration: time.Since(sent), Late: late})
	}
}

// releaseContext returns the context for the store call of a release
// given ctx. A ctx that ended with the lease (the lease's own context, or
// one made from it, as Run gives its function) would fail that call, and
// a loss it could find would go unseen: it is replaced by one without its
// cancellation, bounded by the TTL.
func (l *Lease) releaseContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() != nil && l.ctx.Err() != nil && context.Cause(ctx) == context.Cause(l.ctx) {
		return context.WithTimeout(context.WithoutCancel(ctx), l.cfg.ttl)
	}
	return ctx, func() {}
}

func (l *Lease) releaseClaim(ctx context.Context) error {
	l.claimMu.Lock()
	defer l.claimMu.Unlock()
	defer l.c.forget(l)
	if l.claimDone {
		return nil
	}
	l.claimDone = true
	return l.claim.Release(ctx)
}

func (l *Lease) extend(ctx context.Context) error {
	l.claimMu.Lock()
	defer l.claimMu.Unlock()
	if l.claimDone {
		return ErrNotHeld
	}
	return l.claim.Extend(ctx, l.cfg.ttl)
}

// renewOnce extends the lease once and returns when to try next; false
// once the lease has ended.
func (l *Lease) renewOnce(interval time.Duration) (time.Duration, bool) {
	l.mu.Lock()
	deadline := l.validUntil
	l.mu.Unlock()
	ctx, cancel := context.WithDeadline(l.ctx, deadline)
	sent := time.Now()
	err := l.extend(ctx)
	cancel()
	return l.renewed(err, sent, deadline, interval, nil)
}

// renewed acts on the answer err to a renewal sent at sent while the
// lease was valid until deadline, and returns when to try next; false
// once the lease has ended. c is the cohort of a batch's renewal.
func (l *Lease) renewed(err error, sent, deadline time.Time, interval time.Duration, c *cohort) (time.Duration, bool) {
	left := time.Until(deadline)
	late := err == nil && left < l.cfg.ttl/6
	// ended, not l.ctx.Err(): they agree (both change under mu), and
	// ended is in a cache line the renewal reads anyway.
	l.mu.Lock()
	ended := l.ended
	l.mu.Unlock()
	if !ended {
		l.observeRenewal(l.ctx, err, sent, late)
	}
	switch {
	case ended:
		return 0, false
	case err == nil:
		if late {
			l.cfg.logger.Warn("fence: renewal succeeded close to the end of the lease's validity; the store is slow or the renew interval too long",
				"key", l.key, "token", l.token, "validity_left", left, "renew_took", time.Since(sent))
		}
		l.extendValidity(sent, c)
		return interval, true
	case errors.Is(err, ErrNotHeld):
		l.lose(LossRefused, err)
		return 0, false
	}
	l.cfg.logger.Warn("fence: renewal failed; retrying", "key", l.key, "token", l.token,
		"valid_for", left, "err", err)
	return retryDelay(interval, left), true
}

// retryDelay is when to try again after a renewal that did not happen,
// with left of the lease's validity left: sooner than the interval, a few
// times before validity runs out.
func retryDelay(interval, left time.Duration) time.Duration {
	return max(minPoll, min(interval, left/4))
}

// extendValidity moves the validity to sent + TTL - margin after a
// successful renewal whose request was sent at sent. The new end is a
// deadline of the lease's own, or of c, the cohort of the batch that
// sent the renewal, whose validity ends at that same instant. If the end
// of the old validity is running now, expire finds the lease valid.
func (l *Lease) extendValidity(sent time.Time, c *cohort) {
	until := sent.Add(l.cfg.ttl - l.cfg.driftMargin())
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended || !until.After(l.validUntil) {
		return
	}
	l.validUntil = until
	if c != nil {
		l.c.sched.expireInCohort(l, c)
	} else {
		l.c.sched.expireLease(l, until)
	}
}

// expire runs when the validity timer fires, and on Err: it ends the
// lease as lost if its validity has run out.
func (l *Lease) expire() {
	l.mu.Lock()
	still := time.Now().Before(l.validUntil) // renewed meanwhile
	l.mu.Unlock()
	if !still {
		l.lose(LossExpired, nil)
	}
}

// lose ends the lease as lost, at once: its context is cancelled with a
// *LostError.
func (l *Lease) lose(reason LossReason, err error) {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return
	}
	l.ended = true
	l.unscheduleLocked()
	lost := &LostError{Key: l.key, Token: l.token, Reason: reason, Err: err}
	l.cancel(lost)
	l.mu.Unlock()
	l.c.forget(l)
	if o := l.c.observer; o != nil {
		o.LeaseEnded(context.WithoutCancel(l.ctx), LeaseEnded{Store: l.c.store, Key: l.key, Owner: l.owner, Token: l.token,
			Held: time.Since(l.acquired), Reason: reason, Err: err})
	}
	l.cfg.logger.Error("fence: lease lost", "key", l.key, "token", l.token, "reason", string(reason), "err", err)
}

// releasedError is the cause of a released lease's context: it matches
// ErrReleased. Its message is made only when asked for, as Release runs
// on every lease. It points at its lease for the key and token, rather
// than copying them, to keep the Lease small.
type releasedError struct {
	lease *Lease
}

func (e *releasedError) Error() string {
	return fmt.Sprintf("%v: %q (token %d)", ErrReleased, e.lease.key, e.lease.token)
}

func (e *releasedError) Unwrap() error { return ErrReleased }
