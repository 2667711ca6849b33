package fence

import (
	"container/heap"
	"sync"
	"time"
)

// schedule runs the deadlines of a Client's leases (validity ends,
// renewals) from one runtime timer.
//
// Leases usually end long before their deadlines come, and a runtime
// timer set and stopped per lease is not free: each new earliest timer
// wakes the network poller, which is dear next to the rest of fence's
// work on an uncontended acquire + release (docs/performance.md). The
// schedule re-arms its timer only when a deadline earlier than the armed
// one is added; removing a deadline leaves the timer alone, and when it
// fires with nothing due it re-arms for the next deadline, if any.
type schedule struct {
	mu    sync.Mutex
	queue eventQueue
	batch eventQueue // renewals of batchable leases (batch.go)
	timer *time.Timer
	armed time.Time // when timer fires; zero when it is not set
}

// event is one deadline: at (or just after) at, unless removed first,
// lease's expire or renewTick runs on a goroutine of its own, or, for a
// batched renewal, renewBatch with others on one goroutine (a lease's
// events are fields of the Lease, so that scheduling them allocates
// nothing), or f if set (the schedule's tests use plain functions). An
// event of a cohort (batch.go) is the deadline of every lease in it.
type event struct {
	at     time.Time
	f      func()
	lease  *Lease
	cohort *cohort
	renew  bool // renewTick, not expire
	// batched puts a renewal in the schedule's batch queue: it runs in a
	// batch of the Client's due renewals (batch.go), not on its own.
	batched bool
	index   int // in its queue; -1 once it ran or was removed
}

func (e *event) run() {
	switch {
	case e.f != nil:
		e.f()
	case e.renew:
		e.lease.renewTick()
	default:
		e.lease.expire()
	}
}

// queueOf returns the queue e goes in.
func (s *schedule) queueOf(e *event) *eventQueue {
	if e.batched {
		return &s.batch
	}
	return &s.queue
}

// put schedules e, which is not scheduled now, for at.
func (s *schedule) put(e *event, at time.Time) {
	s.mu.Lock()
	e.at = at
	heap.Push(s.queueOf(e), e)
	s.armLocked()
	s.mu.Unlock()
}

// armLocked sets the timer for the earliest deadline if it is not set for
// that or earlier.
func (s *schedule) armLocked() {
	var next time.Time
	switch {
	case len(s.queue) > 0 && len(s.batch) > 0:
		next = s.queue[0].at
		if s.batch[0].at.Before(next) {
			next = s.batch[0].at
		}
	case len(s.queue) > 0:
		next = s.queue[0].at
	case len(s.batch) > 0:
		next = s.batch[0].at
	default:
		return
	}
	if !s.armed.IsZero() && !next.Before(s.armed) {
		return
	}
	s.armed = next
	if s.timer == nil {
		s.timer = time.AfterFunc(time.Until(next), s.fire)
	} else {
		s.timer.Reset(time.Until(next))
	}
}

// fire runs every deadline that has come, each on its own goroutine (a
// renewal waits for the store), and arms the timer for the next. Batched
// renewals run in batches, one goroutine each (takeBatchesLocked); the
// validity ends of a cohort's leases are checked on one goroutine.
func (s *schedule) fire() {
	s.mu.Lock()
	s.armed = time.Time{}
	now := time.Now()
	var due []*event
	var ending [][]*Lease
	for len(s.queue) > 0 && !s.queue[0].at.After(now) {
		e := heap.Pop(&s.queue).(*event)
		if e.cohort != nil {
			ending = append(ending, e.cohort.takeExpiringLocked())
		} else {
			due = append(due, e)
		}
	}
	batches := s.takeBatchesLocked(now)
	s.armLocked()
	s.mu.Unlock()
	for _, e := range due {
		go e.run()
	}
	for _, ls := range ending {
		go expireEach(ls)
	}
	for _, b := range batches {
		go renewBatch(b)
	}
}

// expireLease makes l's own event the end of its validity, at until,
// in place of the one it had (its own, or its cohort's).
func (s *schedule) expireLease(l *Lease, until time.Time) {
	s.mu.Lock()
	s.leaveExpiryCohortLocked(l)
	e := l.expiry
	e.at = until
	if e.index >= 0 {
		heap.Fix(&s.queue, e.index)
	} else {
		heap.Push(&s.queue, e)
	}
	s.armLocked()
	s.mu.Unlock()
}

// dropLease takes every deadline of l off the schedule: its own events
// and its places in cohorts.
func (s *schedule) dropLease(l *Lease) {
	if l.expiry == nil {
		return // never scheduled
	}
	s.mu.Lock()
	if e := l.expiry; e.index >= 0 {
		heap.Remove(&s.queue, e.index)
	}
	if e := &l.renewEv; e.index >= 0 {
		heap.Remove(s.queueOf(e), e.index)
	}
	s.leaveExpiryCohortLocked(l)
	s.leaveRenewCohortLocked(l)
	s.mu.Unlock()
}

// eventQueue is a heap of events, earliest first.
type eventQueue []*event

func (q eventQueue) Len() int           { return len(q) }
func (q eventQueue) Less(i, j int) bool { return q[i].at.Before(q[j].at) }
func (q eventQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index = i
	q[j].index = j
}

func (q *eventQueue) Push(x any) {
	e := x.(*event)
	e.index = len(*q)
	*q = append(*q, e)
}

func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*q = old[:len(old)-1]
	e.index = -1
	return e
}
