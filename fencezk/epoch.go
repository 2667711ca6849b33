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
// and read once per ZooKeeper session: every enqueue checks, in its own
// multi-operation, that the epoch znode is still there unchanged
// (version 0), and the session that read it is the session that ran the
// multi. An ensemble that lost its data (every member's data directory
// gone) lost every session with it, and the epoch: the next driver seeds
// it again from its clock, later, so new tokens are above old ones. The
// one assumption (docs/design.md section 3, rule 9): the clock of the
// machine that seeds is not behind the earlier seeders' by more than the
// time between the old epoch's last token and the new seeding.

// epochName is the epoch znode's name under the root. An escaped key never
// holds "%" followed by a lower-case letter, so no key's queue has it.
const epochName = "%epoch"

// seedClock is the clock an epoch is seeded from; tests set it back.
var seedClock = time.Now

// epoch is the token epoch as one session read it.
type epoch struct {
	sid  int64 // the session that read it; 0: not read
	base int64 // seed − the epoch znode's czxid
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
			if sid == 0 || d.conn.SessionID() != sid {
				continue // read across a new session: read again in it
			}
			e := epoch{sid: sid, base: base}
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
			_, err := d.conn.Create(path, []byte(seed), 0, d.acl)
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

// epochBase is the token base of the epoch znode at path.
func epochBase(path string, data []byte, st *zk.Stat) (int64, error) {
	seed, err := strconv.ParseInt(string(data), 10, 64)
	if err != nil || seed <= 0 {
		return 0, fmt.Errorf("the token epoch %s holds %q, not a time in microseconds: tokens cannot be issued (delete it, and fence seeds it again)", path, data)
	}
	if st.Version != 0 {
		return 0, fmt.Errorf("the token epoch %s was rewritten (version %d): fence writes it once; delete it, and fence seeds it again", path, st.Version)
	}
	return seed - st.Czxid, nil
}
