package fenceetcd

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence"
)

// claim is one granted lease: the holder's queue entry.
type claim struct {
	d    *Driver
	s    *session
	key  string
	name string // the entry's etcd key
	rev  int64  // its create revision: the token
	lost chan error

	notify      atomic.Pointer[func(error)] // fence.LossNotifier's function
	stopSession func() bool                 // stops reporting the session's end

	// The watch on the entry, guarded by d.watches.mu.
	due   time.Time          // when it starts, unless a renewal starts it sooner
	state watchState         // pending, watching or done
	stop  context.CancelFunc // ends it, once watching
}

type watchState uint8

const (
	watchPending watchState = iota
	watchRunning
	watchDone
)

func (d *Driver) newClaim(s *session, key, name string, rev int64) *claim {
	c := &claim{d: d, s: s, key: key, name: name, rev: rev, lost: make(chan error, 1)}
	c.stopSession = context.AfterFunc(s.ended, func() {
		c.lose(fmt.Errorf("%w: %q: %w", fence.ErrNotHeld, c.key, c.s.err()))
	})
	d.watches.add(c)
	return c
}

// Token implements fence.Claim: the entry's create revision.
func (c *claim) Token() int64 { return c.rev }

// Lost implements fence.SessionClaim.
func (c *claim) Lost() <-chan error { return c.lost }

// NotifyLost implements fence.LossNotifier.
func (c *claim) NotifyLost(f func(error)) {
	c.notify.Store(&f)
	select {
	case err := <-c.lost: // reported before f was registered
		f(err)
	default:
	}
}

// startWatch starts the watch on the entry now, if it is pending.
func (c *claim) startWatch() {
	c.d.watches.mu.Lock()
	defer c.d.watches.mu.Unlock()
	c.startLocked()
}

func (c *claim) startLocked() {
	if c.state != watchPending {
		return
	}
	c.state = watchRunning
	ctx, cancel := context.WithCancel(c.d.ctx)
	c.stop = cancel
	c.d.wg.Add(1)
	go c.watch(ctx)
}

// stopWatch stops reporting losses: the session's end and, pending or
// running, the watch on the entry.
func (c *claim) stopWatch() {
	c.stopSession()
	c.d.watches.mu.Lock()
	defer c.d.watches.mu.Unlock()
	if c.state == watchRunning {
		c.stop()
	}
	c.state = watchDone
}

// watchDelay is how long after the grant the watch on a holder's entry
// starts (a renewal starts it sooner). Most leases of a busy key are
// released before, and a watch per lease costs etcd and the client about
// a quarter of an uncontended acquire + release. A deletion meanwhile is
// not missed: the watch starts from the entry's create revision, so it
// replays it.
const watchDelay = 100 * time.Millisecond

// watchQueue starts the watches of a driver's claims watchDelay after
// their grant, from one timer.
type watchQueue struct {
	mu     sync.Mutex
	queue  []*claim // by due time: every claim waits watchDelay
	timer  *time.Timer
	armed  bool
	closed bool
}

func (q *watchQueue) add(c *claim) {
	q.mu.Lock()
	defer q.mu.Unlock()
	c.due = time.Now().Add(watchDelay)
	if q.closed {
		c.state = watchDone
		return
	}
	q.queue = append(q.queue, c)
	if !q.armed {
		q.armLocked(watchDelay)
	}
}

func (q *watchQueue) armLocked(d time.Duration) {
	q.armed = true
	if q.timer == nil {
		q.timer = time.AfterFunc(d, q.fire)
	} else {
		q.timer.Reset(d)
	}
}

// fire starts the watches that are due and arms the timer for the next.
func (q *watchQueue) fire() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.armed = false
	if q.closed {
		return
	}
	now := time.Now()
	n := 0
	for n < len(q.queue) && !q.queue[n].due.After(now) {
		q.queue[n].startLocked()
		q.queue[n] = nil
		n++
	}
	q.queue = q.queue[n:]
	if len(q.queue) > 0 {
		q.armLocked(time.Until(q.queue[0].due))
	}
}

// close starts no more watches; the driver's context ends those running.
func (q *watchQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	for _, c := range q.queue {
		if c.state == watchPending {
			c.state = watchDone
		}
	}
	q.queue = nil
	if q.timer != nil {
		q.timer.Stop()
	}
}

// watch reports the deletion of the entry as soon as etcd tells. It runs
// until then or until the claim is released. If the watch itself breaks,
// Extend still checks the entry.
func (c *claim) watch(ctx context.Context) {
	defer c.d.wg.Done()
	wch := c.d.cli.Watch(ctx, c.name, clientv3.WithRev(c.rev+1), clientv3.WithFilterPut())
	for {
		select {
		case <-ctx.Done():
			return
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				wch = nil // broken (compaction, client closed): rely on Extend
				continue
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					c.lose(fmt.Errorf("%w: %q: holder entry %s was deleted", fence.ErrNotHeld, c.key, c.name))
					return
				}
			}
		}
	}
}

// lose reports the loss: to the Client's function if it registered one,
// else on lost.
func (c *claim) lose(err error) {
	if f := c.notify.Load(); f != nil {
		(*f)(err)
		return
	}
	select {
	case c.lost <- err:
	default:
	}
	if f := c.notify.Load(); f != nil { // registered meanwhile
		select {
		case err := <-c.lost:
			(*f)(err)
		default:
		}
	}
}

// Extend implements fence.Claim: it makes sure the session lease lives for
// at least ttl (a keepalive, only if the background one does not already
// reach that far), then checks in one transaction that the entry still
// exists with this claim's create revision.
func (c *claim) Extend(ctx context.Context, ttl time.Duration) error {
	if err := c.s.ensure(ctx, ttl); err != nil {
		if c.s.err() != nil {
			c.stopWatch()
			return fmt.Errorf("%w: %q: %w", fence.ErrNotHeld, c.key, err)
		}
		return fmt.Errorf("fenceetcd: extend %q: %w", c.key, err)
	}
	resp, err := c.d.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(c.name), "=", c.rev)).Commit()
	if err != nil {
		return fmt.Errorf("fenceetcd: extend %q: %w", c.key, err)
	}
	if !resp.Succeeded {
		c.stopWatch()
		return fmt.Errorf("%w: %q: holder entry %s is gone", fence.ErrNotHeld, c.key, c.name)
	}
	c.startWatch()
	return nil
}

// Release implements fence.Claim: it deletes the entry only if it still
// has this claim's create revision.
func (c *claim) Release(ctx context.Context) error {
	defer c.stopWatch()
	resp, err := c.d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(c.name), "=", c.rev)).
		Then(clientv3.OpDelete(c.name)).
		Commit()
	if err != nil {
		return fmt.Errorf("fenceetcd: release %q: %w", c.key, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: %q: holder entry %s is gone", fence.ErrNotHeld, c.key, c.name)
	}
	return nil
}
