package fenceetcd

import (
	"context"
	"fmt"
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
	stop context.CancelFunc // ends the watch
}

func (d *Driver) newClaim(s *session, key, name string, rev int64) *claim {
	ctx, cancel := context.WithCancel(d.ctx)
	c := &claim{d: d, s: s, key: key, name: name, rev: rev, lost: make(chan error, 1), stop: cancel}
	d.wg.Add(1)
	go c.watch(ctx)
	return c
}

// Token implements fence.Claim: the entry's create revision.
func (c *claim) Token() int64 { return c.rev }

// Lost implements fence.SessionClaim.
func (c *claim) Lost() <-chan error { return c.lost }

// watch reports the loss of the lease as soon as etcd tells: the session
// ends, or the entry is deleted. It runs until then or until the claim is
// released. If the watch itself breaks, Extend still checks the entry.
func (c *claim) watch(ctx context.Context) {
	defer c.d.wg.Done()
	wch := c.d.cli.Watch(ctx, c.name, clientv3.WithRev(c.rev+1), clientv3.WithFilterPut())
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.s.done:
			c.lose(fmt.Errorf("%w: %q: %w", fence.ErrNotHeld, c.key, c.s.err()))
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

func (c *claim) lose(err error) {
	select {
	case c.lost <- err:
	default:
	}
}

// Extend implements fence.Claim: it makes sure the session lease lives for
// at least ttl (a keepalive, only if the background one does not already
// reach that far), then checks in one transaction that the entry still
// exists with this claim's create revision.
func (c *claim) Extend(ctx context.Context, ttl time.Duration) error {
	if err := c.s.ensure(ctx, ttl); err != nil {
		if c.s.err() != nil {
			c.stop()
			return fmt.Errorf("%w: %q: %w", fence.ErrNotHeld, c.key, err)
		}
		return fmt.Errorf("fenceetcd: extend %q: %w", c.key, err)
	}
	resp, err := c.d.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(c.name), "=", c.rev)).Commit()
	if err != nil {
		return fmt.Errorf("fenceetcd: extend %q: %w", c.key, err)
	}
	if !resp.Succeeded {
		c.stop()
		return fmt.Errorf("%w: %q: holder entry %s is gone", fence.ErrNotHeld, c.key, c.name)
	}
	return nil
}

// Release implements fence.Claim: it deletes the entry only if it still
// has this claim's create revision.
func (c *claim) Release(ctx context.Context) error {
	defer c.stop()
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
