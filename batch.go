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
// ended meanwhile is not renewed by the batch's answer. The leases a
// batch renews keep their own validity timers, so a batch cannot make a
// lease outside it late.

// maxBatch bounds the leases in one ExtendBatch call: enough for few
// round trips per renew interval with thousands of leases, few enough
// that one failed or slow call touches a bounded number of leases, and
// that one call's request and the store's work on it stay small.
const maxBatch = 256

// batchWindow is how long before its renewal is due a lease joins a batch
// that starts: a quarter of its renew interval. Leases renewed together
// are due together again, so a Client's leases gather into few batches
// per interval after their first renewal; and no lease is ever renewed
// sooner than three quarters of its interval after its last renewal,
// which bounds the extra renewals batching can cost.
func (l *Lease) batchWindow() time.Duration { return l.cfg.renewInterval() / 4 }

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
	for len(s.batch) > 0 {
		e := s.batch[0]
		if e.at.After(now.Add(e.lease.batchWindow())) {
			break
		}
		heap.Pop(&s.batch)
		b = append(b, e.lease)
		if len(b) == maxBatch {
			batches = append(batches, b)
			b = nil
		}
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
	for i, l := range ls {
		interval := l.cfg.renewInterval()
		if errs[i] == errClaimBusy {
			l.renewDone(retryDelay(interval, time.Until(deadlines[i])), true)
			continue
		}
		l.renewDone(l.renewed(errs[i], sent, deadlines[i], interval))
	}
}

// errClaimBusy marks a lease left out of its batch.
var errClaimBusy = errors.New("fence: claim busy")
