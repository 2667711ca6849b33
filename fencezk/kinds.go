package fencezk

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/fencing/fence"
)

// Semaphores and reader-writer locks are queues too, each kind under a
// container of its own beside the key's lock queue:
//
//	<root>/<escaped key>/n<owner>-<seq>                lock
//	<root>/<escaped key>%sem/s<limit>.<owner>-<seq>    semaphore
//	<root>/<escaped key>%rw/r<owner>-<seq>             reader
//	<root>/<escaped key>%rw/w<owner>-<seq>             writer
//
// An escaped key never holds "%" followed by a lower-case letter, so these
// containers belong to no lock key, and List (which decodes the root's
// children) passes over them. Escaped owners never hold a ".", so a
// semaphore entry's name tells its limit.
//
// Who holds, by sequence:
//   - semaphore: the first Limit children;
//   - reader: every reader with no writer before it;
//   - writer: the first child.
//
// The token is the holder's own znode's czxid (plus the epoch's base), as
// for locks. It is above every earlier grant's token for the key because
// a child holds only once every child before it holds or has gone: grants come in sequence order,
// which is czxid order, even for a waiter whose znode was created long
// before its grant (every child granted meanwhile was before it, with a
// smaller czxid); and a child created after a grant returned has a greater
// czxid. A waiting writer's znode keeps the readers that come after it
// waiting, so writers are never starved by readers; a writer that gives up
// deletes its znode (or its session expires).

// Supports implements fence.KindSupporter: locks, semaphores and
// reader-writer locks, all as FIFO queues.
func (d *Store) Supports(k fence.Kind) bool { return k <= fence.KindWrite }

var _ fence.KindSupporter = (*Store)(nil)

// queuePath returns the znode of req's queue and the name prefix of its
// sequential child.
func (d *Store) queuePath(req fence.Request) (parent, prefix string) {
	owner := names.Encode(req.Owner)
	base := d.KeyPath(req.Key)
	switch req.Kind {
	case fence.KindSemaphore:
		return base + "%sem", base + "%sem/s" + strconv.Itoa(req.Limit) + "." + owner + "-"
	case fence.KindRead:
		return base + "%rw", base + "%rw/r" + owner + "-"
	case fence.KindWrite:
		return base + "%rw", base + "%rw/w" + owner + "-"
	}
	return base, base + "/n" + owner + "-"
}

// holdsNow tells whether a reader or semaphore child just queued at path,
// as the n-th child of its queue, holds at once. For a semaphore it fails
// with ErrLimitMismatch if the queue's first child, a holder, was queued
// with another limit.
func (d *Store) holdsNow(ctx context.Context, req fence.Request, path string, n int32) (bool, error) {
	q, i, err := d.listQueue(ctx, path)
	if err != nil {
		return false, err
	}
	if req.Kind == fence.KindRead {
		return waitsFor(q, i) < 0, nil
	}
	if err := d.checkLimit(ctx, req, path, q, i); err != nil {
		return false, err
	}
	// Every other child was queued before ours: the count from the
	// enqueue's own reply, through the leader, is exact.
	return int(n) <= req.Limit, nil
}

// listQueue lists the queue of path and finds path in it.
func (d *Store) listQueue(ctx context.Context, path string) ([]child, int, error) {
	parent, name := parentOf(path), path[strings.LastIndexByte(path, '/')+1:]
	var kids []string
	if err := d.await(ctx, func() (err error) {
		kids, _, err = d.conn.Children(parent)
		return err
	}, nil); err != nil {
		return nil, 0, err
	}
	q := queue(kids)
	i := slices.IndexFunc(q, func(c child) bool { return c.name == name })
	if i < 0 {
		return nil, 0, errEntryGone
	}
	return q, i, nil
}

// checkLimit fails with ErrLimitMismatch if the first child of q, a holder
// unless it is ours, was queued with a limit other than req's. A read from
// a follower may still show a child that has gone: a mismatch is
// confirmed through the leader first.
func (d *Store) checkLimit(ctx context.Context, req fence.Request, path string, q []child, i int) error {
	for len(q) > 0 && i > 0 && q[0].limit != req.Limit {
		err := d.check(ctx, parentOf(path)+"/"+q[0].name)
		if err == nil {
			return fmt.Errorf("%w: held with limit %d, asked with %d", fence.ErrLimitMismatch, q[0].limit, req.Limit)
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return err
		}
		q, i = q[1:], i-1
	}
	return nil
}

// waitKind waits until the child at path, queued as the n-th child of its
// queue, holds.
func (d *Store) waitKind(ctx context.Context, req fence.Request, path string, n int32) error {
	switch req.Kind {
	case fence.KindRead:
		return d.waitTurn(ctx, path)
	case fence.KindSemaphore:
		q, i, err := d.listQueue(ctx, path)
		if err != nil {
			return err
		}
		if err := d.checkLimit(ctx, req, path, q, i); err != nil {
			return err
		}
		if int(n) <= req.Limit {
			return nil
		}
		return d.waitSlot(ctx, path, req.Limit)
	}
	return d.waitTurn(ctx, path)
}

// waitSlot returns once fewer than limit children are before path's. Any
// deletion before it may free a slot, so it watches the queue's children
// and looks again after each change: a release wakes every waiter of the
// semaphore for one listing each.
func (d *Store) waitSlot(ctx context.Context, path string, limit int) error {
	parent, name := parentOf(path), path[strings.LastIndexByte(path, '/')+1:]
	for {
		var (
			kids []string
			ch   <-chan zk.Event
		)
		if err := d.await(ctx, func() (err error) {
			kids, _, ch, err = d.conn.ChildrenW(parent)
			return err
		}, nil); err != nil {
			return err
		}
		q := queue(kids)
		i := slices.IndexFunc(q, func(c child) bool { return c.name == name })
		if i < 0 {
			return errEntryGone
		}
		if i < limit {
			return d.check(ctx, path)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-d.ctx.Done():
			return errClosed
		case ev := <-ch:
			if ev.Type == zk.EventNotWatching {
				return fmt.Errorf("%w: %w", errEntryGone, ev.Err)
			}
		}
	}
}
