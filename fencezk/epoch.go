package fencezk

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/go-zookeeper/zk"
)

// Tokens are a czxid plus the base of the token epoch, a persistent znode
// beside the queues:
//
//	<root>/%epoch   data: a time in microseconds since 1970 (the seed)
//
// base = seed − the epoch znode's czxid, so the first token after the
// seeding is about the seed, and tokens then grow with the zxids. A
// standalone server's zxids grow by one per write; an ensemble's also
// jump by 2³² (their high half, the election epoch) at each leader
// election, which docs/zookeeper.md weighs.
//
// The epoch is put, if absent, by the first driver that needs a token,
// together with its mark, a child named by its seed, in one
// multi-operation:
//
//	<root>/%epoch/<seed>   no data: the epoch's mark
//
// A session reads the epoch once, and every enqueue checks, in its own
// multi-operation, that the mark it read is still there unchanged, and
// the session that read it is the session that ran the multi. An epoch
// deleted and seeded again while sessions live (an operator re-seeding
// it, the whole root removed) has a new seed and so a new mark: a session
// that read the old one finds its mark gone and reads the epoch again.
// Checking the epoch znode alone would not tell: a new one has version 0
// too, and sessions with the old base would go on issuing tokens below
// the new base's. An ensemble that lost its data (every member's data
// directory gone) lost every session with it, and the epoch: the next
// driver seeds it again from its clock, later, so new tokens are above
// old ones. The one assumption (docs/design.md section 3, rule 9): the
// clock of the machine that seeds is not behind the earlier seeders' by
// more than the time between the old epoch's last token and the new
// seeding.

// epochName is the epoch znode's name under the root. An escaped key never
// holds "%" followed by a lower-case letter, so no key's queue has it.
const epochName = "%epoch"

// seedClock is the clock an epoch is seeded from; tests set it back.
var seedClock = time.Now

// epoch is the token epoch as one session read it.
type epoch struct {
	sid  int64  // the session that read it; 0: not read
	base int64  // seed − the epoch znode's czxid
	mark string // the path of its mark, which enqueues check
}

func (d *Store) epochPath() string { return d.root + "/" + epochName }

// tokenBase returns the token base for the driver's current session,
// reading (or seeding) the epoch if this session has not.
func (d *Store) tokenBase(ctx context.Context) (epoch, error) {
	d.epochMu.Lock()
	e := d.epoch
	d.epochMu.Unlock()
	if e.sid != 0 && e.sid == d.conn.SessionID() {
		return e, nil
	}
	return d.loadEpoch(ctx)
}

// sameSession reports whether e was read by the session the driver has
// now: a call made between reading e and this one ran in e's session
// (sessions only ever move on to a new id).
func (d *Store) sameSession(e epoch) bool { return e.sid == d.conn.SessionID() }

// forgetEpoch drops e from the cache: its znode was not found.
func (d *Store) forgetEpoch(e epoch) {
	d.epochMu.Lock()
	if d.epoch == e {
		d.epoch = epoch{}
	}
	d.epochMu.Unlock()
}

// loadEpoch reads the epoch znode, seeding it if it is absent.
func (d *Store) loadEpoch(ctx context.Context) (epoch, error) {
	path := d.epochPath()
	for {
		sid := d.conn.SessionID()
		var (
			data []byte
			st   *zk.Stat
		)
		err := d.await(ctx, func() (err error) {
			data, st, err = d.conn.Get(path)
			return err
		}, nil)
		if err == nil {
			base, err := epochBase(path, data, st)
			if err != nil {
				return epoch{}, err
			}
			mark := path + "/" + string(data)
			switch ok, err := d.markEpoch(ctx, mark, st.Czxid); {
			case err != nil:
				return epoch{}, err
			case !ok:
				continue // the epoch changed since the read: read again
			}
			if sid == 0 || d.conn.SessionID() != sid {
				continue // read across a new session: read again in it
			}
			e := epoch{sid: sid, base: base, mark: mark}
			d.epochMu.Lock()
			d.epoch = e
			d.epochMu.Unlock()
			return e, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return epoch{}, fmt.Errorf("read the token epoch: %w", err)
		}
		seed := strconv.FormatInt(seedClock().UnixMicro(), 10)
		err = d.await(ctx, func() error {
			_, err := d.conn.Multi(
				&zk.CreateRequest{Path: path, Data: []byte(seed), Acl: d.acl},
				&zk.CreateRequest{Path: path + "/" + seed, Acl: d.acl},
			)
			return err
		}, nil)
		if errors.Is(err, zk.ErrNoNode) {
			if err := d.makeRoot(ctx); err != nil {
				return epoch{}, err
			}
			continue
		}
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return epoch{}, fmt.Errorf("seed the token epoch: %w", err)
		}
		// Created, by us or another driver: read it back.
	}
}

// markEpoch makes sure the epoch znode whose czxid is czxid has its
// mark: an epoch seeded by an earlier fencezk has none. It reports false
// if the epoch znode changed meanwhile (deleted, or seeded again), after
// removing a mark it may have put on the new one.
func (d *Store) markEpoch(ctx context.Context, mark string, czxid int64) (bool, error) {
	err := d.await(ctx, func() error {
		_, err := d.conn.Create(mark, nil, 0, d.acl)
		return err
	}, nil)
	switch {
	case errors.Is(err, zk.ErrNodeExists):
		// Put with the epoch, or by an earlier session: the mark names
		// the seed, which no other epoch has.
		return true, nil
	case errors.Is(err, zk.ErrNoNode):
		return false, nil // the epoch is gone
	case err != nil:
		return false, fmt.Errorf("mark the token epoch: %w", err)
	}
	var st *zk.Stat
	err = d.await(ctx, func() (err error) {
		_, st, err = d.conn.Exists(parentOf(mark))
		return err
	}, nil)
	if err != nil {
		return false, fmt.Errorf("read the token epoch: %w", err)
	}
	if st != nil && st.Czxid == czxid {
		return true, nil
	}
	// Seeded again between the read and the mark: the mark names the old
	// seed, which the new epoch must not carry.
	err = d.await(ctx, func() error { return d.conn.Delete(mark, 0) }, nil)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return false, fmt.Errorf("remove a mark put on a new token epoch: %w", err)
	}
	return false, nil
}

// epochBase is the token base of the epoch znode at path.
func epochBase(path string, data []byte, st *zk.Stat) (int64, error) {
	seed, err := strconv.ParseInt(string(data), 10, 64)
	if err != nil || seed <= 0 {
		return 0, fmt.Errorf("the token epoch %s holds %q, not a time in microseconds: tokens cannot be issued (delete it with all under it, and fence seeds it again)", path, data)
	}
	if st.Version != 0 {
		return 0, fmt.Errorf("the token epoch %s was rewritten (version %d): fence writes it once; delete it with all under it, and fence seeds it again", path, st.Version)
	}
	return seed - st.Czxid, nil
}
