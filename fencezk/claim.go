package fencezk

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/lossnote"
)

// claim is one granted lease: the holder's ephemeral znode.
type claim struct {
	d              *Store
	key            string
	path           string
	token          int64
	sid            int64              // the session that created the znode
	stop           context.CancelFunc // ends the watch
	*lossnote.Note                    // NotifyLost
}

func (d *Store) newClaim(key, path string, token int64) *claim {
	ctx, cancel := context.WithCancel(d.ctx)
	c := &claim{d: d, key: key, path: path, token: token, sid: d.conn.SessionID(), stop: cancel, Note: lossnote.New()}
	d.wg.Go(func() { c.watch(ctx) })
	return c
}

// Token implements fence.Claim: the znode's czxid plus the epoch's base.
func (c *claim) Token() int64 { return c.token }

// watch reports the loss of the lease as soon as ZooKeeper tells: the
// znode is deleted, or the session expires. A dropped connection is not a
// loss: ZooKeeper restores the watch when the client reconnects within the
// session timeout, and reports a deletion that happened meanwhile.
func (c *claim) watch(ctx context.Context) {
	retry := time.NewTimer(0)
	defer retry.Stop()
	<-retry.C
	for {
		exists, _, ch, err := c.d.conn.ExistsW(c.path)
		switch {
		case errors.Is(err, zk.ErrSessionExpired):
			c.Report(fmt.Errorf("%w: %q: %w", fence.ErrNotHeld, c.key, err))
			return
		case errors.Is(err, zk.ErrClosing):
			return // the connection was closed: Extend reports it
		case err != nil:
			// No connection now: set the watch again once there is one.
			retry.Reset(time.Second)
			select {
			case <-ctx.Done():
				return
			case <-retry.C:
			}
			continue
		case !exists && c.d.conn.SessionID() != c.sid:
			// The watch was not set yet when the session expired.
			c.Report(fmt.Errorf("%w: %q: znode %s is gone: %w", fence.ErrNotHeld, c.key, c.path, zk.ErrSessionExpired))
			return
		case !exists:
			c.Report(fmt.Errorf("%w: %q: znode %s is gone", fence.ErrNotHeld, c.key, c.path))
			return
		}
		select {
		case <-ctx.Done():
			return
		case ev := <-ch:
			switch {
			case ev.Type == zk.EventNodeDeleted:
				c.Report(fmt.Errorf("%w: %q: znode %s was deleted", fence.ErrNotHeld, c.key, c.path))
				return
			case ev.Type == zk.EventNotWatching && errors.Is(ev.Err, zk.ErrSessionExpired):
				c.Report(fmt.Errorf("%w: %q: %w", fence.ErrNotHeld, c.key, ev.Err))
				return
			case ev.Type == zk.EventNotWatching:
				return // closing
			}
		}
	}
}

// Extend implements fence.Claim: one multi-operation checking that the
// znode still exists, through the leader, within this session.
func (c *claim) Extend(ctx context.Context, ttl time.Duration) error {
	err := c.d.check(ctx, c.path)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrSessionExpired):
		c.stop()
		return fmt.Errorf("%w: %q: znode %s: %w", fence.ErrNotHeld, c.key, c.path, err)
	}
	return fmt.Errorf("fencezk: extend %q: %w", c.key, err)
}

// Release implements fence.Claim: it deletes the znode. If ZooKeeper
// cannot answer now (an election, a server lost), or ctx ends first, the
// delete goes on in the background until it lands or the znode is gone
// with its session (retryGone): the session outlives the outage, and
// with it the znode, which would keep the key held for good.
func (c *claim) Release(ctx context.Context) error {
	defer c.stop()
	del := func() error { return c.d.conn.Delete(c.path, 0) }
	err := c.d.await(ctx, del, nil)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrNoNode), errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrSessionExpired):
		return fmt.Errorf("%w: %q: znode %s: %w", fence.ErrNotHeld, c.key, c.path, err)
	}
	if ctx.Err() != nil || c.d.passing(err) {
		c.d.wg.Go(func() { c.d.retryGone(del) })
		return fmt.Errorf("fencezk: release %q: %w (deleting its znode goes on in the background)", c.key, err)
	}
	return fmt.Errorf("fencezk: release %q: %w", c.key, err)
}
