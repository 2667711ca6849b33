package fenceetcd

import (
	"context"
	"encoding/json"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence"
)

// Semaphores and reader-writer locks are queues too, each kind in its own
// directory beside the key's lock queue:
//
//	<prefix>/<escaped key>/<name>        lock
//	<prefix>/<escaped key>%sem/<name>    semaphore; the entry records its limit
//	<prefix>/<escaped key>%rw/r/<name>   reader
//	<prefix>/<escaped key>%rw/w/<name>   writer
//
// where <name> is the session's lease id and an entry number (see
// session.takeSlot).
//
// An escaped key never holds "%" followed by a lower-case letter, so these
// directories belong to no lock key, and List (which decodes the segment
// before the first "/") passes over them.
//
// Who holds, by create revision:
//   - semaphore: the first Limit entries;
//   - reader: every reader with no writer ahead of it;
//   - writer: the first entry.
//
// The token is the holder's own entry's create revision (plus the base of
// the token epoch, epoch.go), as for locks. That gives every grant a token
// above every earlier grant's for the key, because an entry holds only once every entry ahead of it holds (or is
// gone): a semaphore entry has fewer than Limit entries ahead of it, all
// earlier; a reader has no writer ahead, and the readers ahead of it have
// none either; a writer is first. So grants come in create-revision order,
// even for a waiter whose entry was created long before it was granted:
// every entry granted meanwhile was ahead of it, with a smaller revision.
// And an entry created after a grant returned has a greater revision than
// that grant's. A waiting writer's entry keeps new readers behind it:
// writers are never starved by readers (FIFO, not a timed intent: a
// writer that stops waiting deletes its entry, or its session expires).
// The ahead ranges are rwpref.WaitsFor as range reads: a reader waits for
// the last writer before it, anything else for the entry before it.

// Supports implements fence.KindSupporter: locks, semaphores and
// reader-writer locks, all as FIFO queues.
func (d *Store) Supports(k fence.Kind) bool { return k <= fence.KindWrite }

var _ fence.KindSupporter = (*Store)(nil)

// queue is where one acquisition's entry goes.
type queue struct {
	dir    string // the kind's directory of the key, ending in "/"
	ahead  string // the range that must have no entry before ours for us to hold (semaphores: unused)
	prefix string // where our entry's name goes: dir, or a subdirectory of it
	slot   int    // our entry's number among the session's under prefix
	name   string // our entry: prefix + session.entryName(slot)
	val    string // its value
	delay  string // the key's lock-delay entry, for locks (see lockdelay.go)
}

// queueOf names the entry of an acquisition of req on session s, taking
// one of the session's entry names under the key's directory; the name is
// given back once the entry is known to be gone (see session.takeSlot).
func (d *Store) queueOf(s *session, req fence.Request) queue {
	base := d.root + names.Encode(req.Key)
	q := queue{val: encodeEntry(req)}
	switch req.Kind {
	case fence.KindSemaphore:
		q.dir = base + "%sem/"
		q.prefix = q.dir
	case fence.KindRead:
		q.dir = base + "%rw/"
		q.ahead = q.dir + "w/"
		q.prefix = q.dir + "r/"
	case fence.KindWrite:
		q.dir = base + "%rw/"
		q.ahead = q.dir
		q.prefix = q.dir + "w/"
	default:
		q.dir = base + "/"
		q.ahead = q.dir
		q.prefix = q.dir
		q.delay = base + "%lockdelay"
	}
	q.slot = s.takeSlot(q.prefix)
	q.name = q.prefix + s.entryName(q.slot)
	return q
}

// queueSlot puts the entry of a semaphore acquisition, bound to lease l
// with value val, and reads the first Limit entries, in one transaction.
// It returns the entry's create revision, the token base read with it
// (epoch.go) and whether the entry holds a slot; an error matching
// fence.ErrLimitMismatch (the entry deleted again) if the first entry, a holder, was queued with another limit.
func (d *Store) queueSlot(ctx context.Context, s, l *session, val string, req fence.Request, q queue) (int64, int64, bool, error) {
	resp, err := d.cli.Txn(ctx).
		Then(clientv3.OpPut(q.name, val, clientv3.WithLease(l.id)),
			clientv3.OpGet(q.dir, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend),
				clientv3.WithLimit(int64(req.Limit))),
			d.epochGet()).
		Commit()
	if err != nil {
		d.abandon(s, q, l)
		return 0, 0, false, d.opError("acquire", req.Key, err, l)
	}
	base, err := d.baseIn(ctx, resp)
	if err != nil {
		d.abandon(s, q, l)
		return 0, 0, false, fmt.Errorf("fenceetcd: acquire semaphore %q: %w", req.Key, err)
	}
	rev := resp.Header.Revision
	kvs := resp.Responses[1].GetResponseRange().Kvs
	if len(kvs) > 0 && kvs[0].CreateRevision != rev {
		var first entry
		if json.Unmarshal(kvs[0].Value, &first) == nil && first.Limit != req.Limit {
			d.abandon(s, q, l)
			return 0, 0, false, fmt.Errorf("fenceetcd: acquire semaphore %q: %w: held with limit %d, asked with %d",
				req.Key, fence.ErrLimitMismatch, first.Limit, req.Limit)
		}
	}
	for _, kv := range kvs {
		if kv.CreateRevision == rev {
			return rev, base, true, nil
		}
	}
	return rev, base, false, nil
}

// trySlot takes a semaphore slot if fewer than Limit entries are queued:
// it queues an entry and, if that entry is not among the first Limit,
// deletes it again (a second round trip, only when the semaphore is full).
func (d *Store) trySlot(ctx context.Context, s *session, req fence.Request, q queue) (fence.Claim, error) {
	rev, base, holds, err := d.queueSlot(ctx, s, s, q.val, req, q)
	if err != nil {
		return nil, err
	}
	if !holds {
		d.abandon(s, q, s)
		return nil, &fence.HeldError{Key: req.Key}
	}
	return d.newClaim(s, req.Key, q, rev, base), nil
}

// acquireSlot queues for a semaphore slot, under the waiter lease w, and
// waits until fewer than Limit entries are ahead of its entry; then it
// binds the entry to the session s (Store.rebind).
func (d *Store) acquireSlot(ctx context.Context, s, w *session, req fence.Request, q queue) (fence.Claim, error) {
	rev, _, holds, err := d.queueSlot(ctx, s, w, encodeWaitingEntry(req), req, q)
	if err != nil {
		return nil, err
	}
	if !holds {
		if err := d.waitSlot(ctx, s, w, q, rev, req.Limit); err != nil {
			d.abandon(s, q, w)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("fenceetcd: acquire semaphore %q: %w", req.Key, err)
		}
	}
	_, base, err := d.rebind(ctx, s, w, q, rev, req)
	if err != nil {
		return nil, fmt.Errorf("fenceetcd: acquire semaphore %q: %w", req.Key, err)
	}
	return d.newClaim(s, req.Key, q, rev, base), nil
}

// waitSlot returns once fewer than limit entries of q.dir were created
// before the entry q.name, created at rev. Any deletion in the directory
// may free a slot, so it watches the whole directory for deletions and
// counts again after each: a release wakes every waiter of the semaphore
// for one count each.
func (d *Store) waitSlot(ctx context.Context, s, w *session, q queue, rev int64, limit int) error {
	for {
		resp, err := d.cli.Txn(ctx).
			Then(clientv3.OpGet(q.name),
				// Not WithCountOnly: etcd counts before it applies the
				// create-revision filter.
				clientv3.OpGet(q.dir, clientv3.WithPrefix(), clientv3.WithKeysOnly(),
					clientv3.WithMaxCreateRev(rev-1), clientv3.WithLimit(int64(limit)))).
			Commit()
		if err != nil {
			return err
		}
		if mine := resp.Responses[0].GetResponseRange().Kvs; len(mine) == 0 || mine[0].CreateRevision != rev {
			return d.entryGone(ctx, s, w)
		}
		if len(resp.Responses[1].GetResponseRange().Kvs) < limit {
			return waiting(s, w)
		}
		if err := d.waitDeleted(ctx, s, w, q.dir, resp.Header.Revision+1, clientv3.WithPrefix()); err != nil {
			return err
		}
	}
}
