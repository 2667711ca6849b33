package fenceetcd

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/delayq"
	"github.com/fencing/fence/internal/kit/lossnote"
	"github.com/fencing/fence/internal/kit/retry"
)

// claim is one granted lease: the holder's queue entry.
type claim struct {
	d    *Store
	s    *session
	key  string
	name string // the entry's etcd key
	// prefix and slot name the entry among the session's (queue.prefix,
	// queue.slot); the name is given back once the entry is gone.
	prefix string
	slot   int
	rev    int64 // its create revision
	token  int64 // rev plus the base of the token epoch (epoch.go)

	// The lock-delay entry's name ("" if none), lease, value and delay
	// (see lockdelay.go).
	delay      string
	delayLease clientv3.LeaseID
	delayVal   string
	delayDur   time.Duration

	*lossnote.Note             // NotifyLost
	stopSession    func() bool // stops reporting the session's end

	pendingWatch *delayq.Item       // starts the watch on the entry
	stop         context.CancelFunc // ends the watch, once started
}

func (d *Store) newClaim(s *session, key string, q queue, rev, base int64) *claim {
	c := &claim{d: d, s: s, key: key, name: q.name, prefix: q.prefix, slot: q.slot, rev: rev, token: base + rev, Note: lossnote.New()}
	c.stopSession = context.AfterFunc(s.ended, func() {
		c.Report(fmt.Errorf("%w: %q: %w", fence.ErrNotHeld, c.key, c.s.err()))
	})
	c.pendingWatch = d.watches.Add(c.startWatch)
	return c
}

// Token implements fence.Claim: the entry's create revision plus the
// base of the token epoch it was granted under.
func (c *claim) Token() int64 { return c.token }

// startWatch starts watching the entry for its deletion (an operator's).
// It runs watchDelay after the grant, or at the first renewal if sooner,
// once; see watchDelay.
func (c *claim) startWatch() {
	ctx, cancel := context.WithCancel(c.d.ctx)
	c.stop = cancel
	c.d.wg.Add(1)
	go c.watch(ctx)
}

// stopWatch stops reporting losses: the session's end and, pending or
// running, the watch on the entry.
func (c *claim) stopWatch() {
	c.stopSession()
	if c.pendingWatch.Cancel() {
		c.stop()
	}
}

// watchDelay is how long after the grant the watch on a holder's entry
// starts (a renewal starts it sooner). Most leases of a busy key are
// released before, and a watch per lease costs etcd and the client a
// good share of an uncontended acquire + release (docs/performance.md).
// A deletion meanwhile is
// not missed: the watch starts from the entry's create revision, so it
// replays it.
const watchDelay = 100 * time.Millisecond

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
					c.Report(fmt.Errorf("%w: %q: holder entry %s was deleted", fence.ErrNotHeld, c.key, c.name))
					if c.dropDelay() {
						c.startDelay()
					}
					return
				}
			}
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
		if c.dropDelay() {
			c.startDelay()
		}
		return fmt.Errorf("%w: %q: holder entry %s is gone", fence.ErrNotHeld, c.key, c.name)
	}
	c.pendingWatch.Start()
	return nil
}

// Release implements fence.Claim: one plain Delete of the entry. No
// comparison is needed: the entry's name belongs to this claim alone until
// Release gives it back (session.takeSlot: the session's lease id and a
// number no other live claim of the session has), so the name can only be
// this acquisition's entry or nothing. A Delete that deletes nothing means
// the entry was already gone: the lease had been lost.
//
// A resumed claim (slot < 0; see Store.Resume) has a name that the dead
// process's session gave it, which this session does not own: its
// Release compares the create revision.
//
// If etcd cannot answer (an election, no reachable member) within
// retry.Attempt, or ctx ends first, Release returns the error and the
// driver goes on releasing in the background, each attempt bounded (a
// delete that etcd holds in an election would otherwise keep the entry
// for seconds) and the next one a second later, or at once after one
// that ran out of time,
// until it lands, finds the entry gone, or the Store closes
// (retry.Until): the session's keepalive outlives the
// outage, and with it the entry, which would keep the key held, by a
// lease its holder released, for as long as the session lives. Until
// then the entry's slot stays the claim's.
func (c *claim) Release(ctx context.Context) error {
	defer c.stopWatch()
	attempt, cancel := context.WithTimeout(ctx, retry.Attempt)
	err := c.release(attempt)
	late := attempt.Err() != nil && ctx.Err() == nil
	cancel()
	if err == nil || errors.Is(err, fence.ErrNotHeld) || ctx.Err() == nil && !late && !passing(err) {
		return err
	}
	c.d.wg.Go(func() {
		retry.Until(c.d.ctx, c.release,
			func(err error) bool { return !errors.Is(err, fence.ErrNotHeld) && passing(err) })
	})
	return fmt.Errorf("%w (releasing goes on in the background)", err)
}

// release makes one attempt to delete the entry (see Release).
func (c *claim) release(ctx context.Context) error {
	if c.slot < 0 || c.delay != "" {
		return c.releaseChecked(ctx)
	}
	resp, err := c.d.cli.Delete(ctx, c.name)
	if err != nil {
		return fmt.Errorf("fenceetcd: release %q: %w", c.key, err)
	}
	c.s.freeSlot(c.prefix, c.slot) // deleted now, or gone already
	if resp.Deleted == 0 {
		return fmt.Errorf("%w: %q: holder entry %s is gone", fence.ErrNotHeld, c.key, c.name)
	}
	return nil
}

// releaseChecked deletes the entry only if it is still this claim's, and
// with it the claim's lock-delay entry, if any, in the same transaction:
// a lost holder's late Release leaves the delay in place.
func (c *claim) releaseChecked(ctx context.Context) error {
	then := []clientv3.Op{clientv3.OpDelete(c.name)}
	if c.delay != "" {
		then = append(then, clientv3.OpDelete(c.delay))
	}
	resp, err := c.d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(c.name), "=", c.rev)).
		Then(then...).
		Commit()
	if err != nil {
		return fmt.Errorf("fenceetcd: release %q: %w", c.key, err)
	}
	c.s.freeSlot(c.prefix, c.slot) // deleted now, or gone already
	if !resp.Succeeded {
		if c.dropDelay() {
			c.startDelay() // lost: the delay runs from now
		}
		return fmt.Errorf("%w: %q: holder entry %s is gone", fence.ErrNotHeld, c.key, c.name)
	}
	if c.dropDelay() {
		_, _ = c.d.cli.Revoke(ctx, c.delayLease) // nothing is bound to it now
	}
	return nil
}
