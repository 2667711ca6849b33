package fence

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Renewal in batches. Where the driver is a BatchExtender, the renewals
// of the leases it can batch wait in a queue of their own in the Client's
// schedule. When the earliest of them falls due, the schedule takes it
// together with every other whose renewal is due within its batch window,
// earliest first, and renews them in batches of at most maxBatch, one
// ExtendBatch call and one goroutine each. Everything else about a renewal
// is as for one lease alone (renewOnce): each lease's validity is
// measured from the moment its batch was sent, a refusal loses that lease
// only, a failure retries each lease on its own schedule, and a lease
// ended meanwhile is not renewed by the batch's answer.
//
// The leases one batch renewed form cohorts, one for each validity and
// renew interval among them (one, where they share the Client's
// settings): each lease of a cohort was sent at the same moment with the
// same TTL, so the end of its validity is the same instant, and its next
// renewal is due at the same instant too. A cohort keeps both on the
// schedule as two deadlines, whatever the number of its leases: its
// leases cost no heap operations of their own per renewal, only a place
// in a list. A lease leaves a cohort's renewal when a batch takes it, and
// its validity when that batch (or a Renew) moves its validity on, or
// when it ends. Until then the cohort's end of validity is its own: a
// batch that is slow or hangs keeps its leases in the cohorts they were
// in, which end them when their validity ends, and touches no lease it
// does not contain.

// maxBatch bounds the leases in one ExtendBatch call: enough for few
// round trips per renew interval with thousands of leases, few enough
// that one failed or slow call touches a bounded number of leases, and
// that one call's request and the store's work on it stay small.
const maxBatch = 256

// batchWindow is how long before its renewal is due a lease with renew
// interval interval joins a batch that starts: a quarter of the interval.
// Leases renewed together are due together again, so a Client's leases
// gather into few batches per interval after their first renewal; and no
// lease is ever renewed sooner than three quarters of its interval after
// its last renewal, which bounds the extra renewals batching can cost.
func batchWindow(interval time.Duration) time.Duration { return interval / 4 }

// window is the batch window of a batched renewal: its lease's, or its
// cohort's.
func (e *event) window() time.Duration {
	if e.cohort != nil {
		return batchWindow(e.cohort.interval)
	}
	return batchWindow(e.lease.cfg.renewInterval())
}

// batchable reports whether the renewals of the lease holding claim go in
// batches: its driver can extend it in a batch, and it is not bound to a
// session (such a lease is kept by its session, not by renewals alone).
func (c *Client) batchable(claim Claim) bool {
	if c.batcher == nil {
		return false
	}
	if _, ok := claim.(SessionClaim); ok {
		return false
	}
	return c.batcher.Batchable(claim)
}

// takeBatchesLocked takes the batched renewals to run now, if the
// earliest is due: it and every one due within its lease's batch window,
// earliest first, in batches of at most maxBatch. s.mu is held.
func (s *schedule) takeBatchesLocked(now time.Time) [][]*Lease {
	if len(s.batch) == 0 || s.batch[0].at.After(now) {
		return nil
	}
	var batches [][]*Lease
	var b []*Lease
	// add adds l to the batch being filled, which gets room for more
	// leases besides it when it starts.
	add := func(l *Lease, more int) {
		if b == nil {
			b = make([]*Lease, 0, min(maxBatch, 1+more))
		}
		b = append(b, l)
		if len(b) == maxBatch {
			batches = append(batches, b)
			b = nil
		}
	}
	for len(s.batch) > 0 {
		e := s.batch[0]
		if e.at.After(now.Add(e.window())) {
			break
		}
		heap.Pop(&s.batch)
		c := e.cohort
		if c == nil {
			add(e.lease, 0)
			continue
		}
		for _, l := range c.leases {
			if l.renewIn == c {
				l.renewIn = nil
				c.renewing--
				add(l, c.renewing)
			}
		}
		c.renewing = 0
	}
	if len(b) > 0 {
		batches = append(batches, b)
	}
	return batches
}

// batchRun is one running batch, as its leases know it: once every lease
// in it has ended (released or lost), its call is cancelled, as the
// renewal of one lease is when the lease ends. left counts the leases in
// it, plus one while renewBatch takes them in.
type batchRun struct {
	left   atomic.Int32
	cancel context.CancelFunc
}

// leave tells the batch that one of its leases ended.
func (b *batchRun) leave() {
	if b.left.Add(-1) == 0 {
		b.cancel()
	}
}

// renewBatch renews ls, leases of one Client whose renewals were taken
// from its schedule, in one ExtendBatch call.
func renewBatch(ls []*Lease) {
	c := ls[0].c
	base, cancelBase := context.WithCancel(context.Background())
	defer cancelBase()
	run := &batchRun{cancel: cancelBase}
	run.left.Store(1)
	// Each lease's renewal runs from here on, as renewTick's does: a
	// Release waits for it. A lease that ended meanwhile is left out.
	deadlines := make([]time.Time, 0, len(ls))
	var earliest time.Time
	n := 0
	for _, l := range ls {
		l.mu.Lock()
		if !l.ended {
			l.renewRunning = true
			l.inBatch = run
			run.left.Add(1)
			deadlines = append(deadlines, l.validUntil)
			if n == 0 || l.validUntil.Before(earliest) {
				earliest = l.validUntil
			}
			ls[n] = l
			n++
		}
		l.mu.Unlock()
	}
	run.leave()
	ls = ls[:n]
	if n == 0 {
		return
	}
	// The call ends when the earliest validity in it ends, as one lease's
	// renewal ends when its validity does.
	ctx, cancel := context.WithDeadline(base, earliest)
	defer cancel()

	// A lease whose claim is busy (a Renew of its own runs) is left out
	// and tries again soon, rather than make the batch, and the other
	// leases in it, wait for that call.
	claims := make([]Claim, 0, n)
	ttls := make([]time.Duration, 0, n)
	taken := make([]bool, n)
	errs := make([]error, n)
	var in []int
	for i, l := range ls {
		if !l.claimMu.TryLock() {
			errs[i] = errClaimBusy
			continue
		}
		taken[i] = true
		if l.claimDone {
			errs[i] = ErrNotHeld
			continue
		}
		in = append(in, i)
		claims = append(claims, l.claim)
		ttls = append(ttls, l.cfg.ttl)
	}
	sent := time.Now()
	if len(claims) > 0 {
		res := c.batcher.ExtendBatch(ctx, claims, ttls)
		if len(res) != len(claims) {
			err := fmt.Errorf("fence: the driver's ExtendBatch returned %d results for %d claims", len(res), len(claims))
			res = make([]error, len(claims))
			for j := range res {
				res[j] = err
			}
		}
		for j, i := range in {
			errs[i] = res[j]
		}
	}
	for i, l := range ls {
		if taken[i] {
			l.claimMu.Unlock()
		}
	}
	// The cohorts are made, with every lease the store extended, before
	// any is on the schedule: from then on the schedule reads them.
	now := time.Now()
	var cs cohorts
	for i, l := range ls {
		if errs[i] == nil {
			cs.add(l, sent, now, n)
		}
	}
	for i, l := range ls {
		interval := l.cfg.renewInterval()
		if errs[i] == errClaimBusy {
			l.renewDone(retryDelay(interval, time.Until(deadlines[i])), true, nil)
			continue
		}
		var c *cohort
		if errs[i] == nil {
			c = cs.of(l)
		}
		next, ok := l.renewed(errs[i], sent, deadlines[i], interval, c)
		l.renewDone(next, ok, c)
	}
}

// cohort is leases that one batch renewed with one validity and renew
// interval: the end of their validity (expiryEv, in the schedule's queue)
// and their next renewal (renewEv, in its batch queue) are deadlines of
// the cohort, on the schedule while a lease is in the cohort for each.
// A lease is in it for its validity while its expiryIn is the cohort,
// and for its renewal while its renewIn is; leaving is setting those to
// nil. Everything but validity, interval and leases is guarded by the
// schedule's mu; those are set before the cohort is on the schedule.
type cohort struct {
	validity, interval time.Duration // TTL - drift margin; renew interval
	leases             []*Lease      // every lease it was made with, in it or not
	expiryEv, renewEv  event
	expiring, renewing int // leases in it for each deadline
}

// cohorts are the cohorts of one batch.
type cohorts []*cohort

// add puts l, which the batch of n leases sent at sent renewed, in the
// cohort of its validity and interval, a new one if there is none: that
// cohort's validity ends at sent + TTL - margin, as extendValidity
// computes it, and its next renewal is due an interval after now.
func (cs *cohorts) add(l *Lease, sent, now time.Time, n int) {
	validity, interval := l.cfg.ttl-l.cfg.driftMargin(), l.cfg.renewInterval()
	c := cs.find(validity, interval)
	if c == nil {
		c = &cohort{validity: validity, interval: interval, leases: make([]*Lease, 0, n)}
		c.expiryEv = event{at: sent.Add(validity), cohort: c, index: -1}
		c.renewEv = event{at: now.Add(interval), cohort: c, batched: true, index: -1}
		*cs = append(*cs, c)
	}
	c.leases = append(c.leases, l)
}

// of returns the cohort add put l in.
func (cs cohorts) of(l *Lease) *cohort {
	return cs.find(l.cfg.ttl-l.cfg.driftMargin(), l.cfg.renewInterval())
}

func (cs cohorts) find(validity, interval time.Duration) *cohort {
	for _, c := range cs {
		if c.validity == validity && c.interval == interval {
			return c
		}
	}
	return nil
}

// expireInCohort makes the end of l's validity, which now ends with c's,
// a deadline of c in place of the one it had (its own, or an earlier
// cohort's).
func (s *schedule) expireInCohort(l *Lease, c *cohort) {
	s.mu.Lock()
	// A lease's validity end is its own event or a cohort's, never both.
	if l.expiryIn != nil {
		s.leaveExpiryCohortLocked(l)
	} else if e := l.expiry; e.index >= 0 {
		heap.Remove(&s.queue, e.index)
	}
	l.expiryIn = c
	if c.expiring++; c.expiring == 1 {
		heap.Push(&s.queue, &c.expiryEv)
		s.armLocked()
	}
	s.mu.Unlock()
}

// renewInCohort makes l's next renewal c's; l has none scheduled (its
// renewal has just run).
func (s *schedule) renewInCohort(l *Lease, c *cohort) {
	s.mu.Lock()
	s.leaveRenewCohortLocked(l)
	l.renewIn = c
	if c.renewing++; c.renewing == 1 {
		heap.Push(&s.batch, &c.renewEv)
		s.armLocked()
	}
	s.mu.Unlock()
}

// leaveExpiryCohortLocked takes l out of the cohort whose end of validity
// is its own, if any, and that cohort's deadline off the schedule if no
// lease is left in it.
func (s *schedule) leaveExpiryCohortLocked(l *Lease) {
	c := l.expiryIn
	if c == nil {
		return
	}
	l.expiryIn = nil
	if c.expiring--; c.expiring == 0 && c.expiryEv.index >= 0 {
		heap.Remove(&s.queue, c.expiryEv.index)
	}
}

// leaveRenewCohortLocked is leaveExpiryCohortLocked for the renewal.
func (s *schedule) leaveRenewCohortLocked(l *Lease) {
	c := l.renewIn
	if c == nil {
		return
	}
	l.renewIn = nil
	if c.renewing--; c.renewing == 0 && c.renewEv.index >= 0 {
		heap.Remove(&s.batch, c.renewEv.index)
	}
}

// takeExpiringLocked takes the leases still in c for their validity,
// whose end has come.
func (c *cohort) takeExpiringLocked() []*Lease {
	var ls []*Lease
	for _, l := range c.leases {
		if l.expiryIn == c {
			l.expiryIn = nil
			ls = append(ls, l)
		}
	}
	c.expiring = 0
	return ls
}

// expireEach checks the validity of each of ls, which ends now unless a
// renewal moved it on meanwhile.
func expireEach(ls []*Lease) {
	for _, l := range ls {
		l.expire()
	}
}

// errClaimBusy marks a lease left out of its batch.
var errClaimBusy = errors.New("fence: claim busy")
