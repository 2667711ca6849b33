// Package delayq starts work a fixed delay after it is queued, from one
// timer per queue, unless it is cancelled first.
//
// Drivers use it for what a lease needs only if it lives a while (a watch
// that reports the loss of a session at once): most leases of a busy key
// are released within milliseconds, and starting that work for each of
// them costs more than the rest of an acquire + release. Every item waits
// the same delay, so the queue is in due order and its timer is set only
// when it was idle or has fired.
package delayq

import (
	"sync"
	"time"
)

// Queue runs each item's function Delay after Add, unless the item was
// started or cancelled before. The zero value is not usable; use New.
type Queue struct {
	delay time.Duration

	mu     sync.Mutex
	items  []*Item
	timer  *time.Timer
	armed  bool
	closed bool
}

// New returns a queue whose items start delay after they are added.
func New(delay time.Duration) *Queue { return &Queue{delay: delay} }

// Item is one queued function.
type Item struct {
	q     *Queue
	due   time.Time
	f     func()
	state state
}

type state uint8

const (
	pending state = iota
	started
	cancelled
)

// Add queues f. f runs on the queue's timer goroutine, or on the caller's
// in Start, with the queue's lock held: it must be quick (start a
// goroutine, not be one) and must not call the queue.
func (q *Queue) Add(f func()) *Item {
	it := &Item{q: q, f: f}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		it.state = cancelled
		return it
	}
	it.due = time.Now().Add(q.delay)
	q.items = append(q.items, it)
	if !q.armed {
		q.armLocked(q.delay)
	}
	return it
}

// Start runs the item's function now if it has not run and was not
// cancelled.
func (it *Item) Start() {
	it.q.mu.Lock()
	defer it.q.mu.Unlock()
	it.startLocked()
}

func (it *Item) startLocked() {
	if it.state == pending {
		it.state = started
		it.f()
	}
}

// Cancel keeps the function from running. It reports whether the function
// had run (before Cancel, never after): the caller then undoes what it
// started.
func (it *Item) Cancel() (ran bool) {
	it.q.mu.Lock()
	defer it.q.mu.Unlock()
	ran = it.state == started
	it.state = cancelled
	return ran
}

func (q *Queue) armLocked(d time.Duration) {
	q.armed = true
	if q.timer == nil {
		q.timer = time.AfterFunc(d, q.fire)
	} else {
		q.timer.Reset(d)
	}
}

// fire runs the functions that are due and sets the timer for the next.
func (q *Queue) fire() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.armed = false
	if q.closed {
		return
	}
	now := time.Now()
	n := 0
	for n < len(q.items) && !q.items[n].due.After(now) {
		q.items[n].startLocked()
		q.items[n] = nil
		n++
	}
	q.items = q.items[n:]
	if len(q.items) > 0 {
		q.armLocked(time.Until(q.items[0].due))
	}
}

// Close cancels every pending item and starts no more.
func (q *Queue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	for _, it := range q.items {
		if it.state == pending {
			it.state = cancelled
		}
	}
	q.items = nil
	if q.timer != nil {
		q.timer.Stop()
	}
}
