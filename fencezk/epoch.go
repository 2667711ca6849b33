package fencezk

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// Tokens are a czxid plus the base of the token epoch, a persistent znode
// beside the queues:
//
//	<root>/%epoch   data: "<seed> elections", seed a time in microseconds
//
// A zxid's high half is the ensemble's election epoch: it grows by one at
// each leader election, so zxids jump by 2³² there, about 72 minutes of
// microseconds. A base per election keeps tokens near the clock across
// those jumps. The epoch znode's own election has base = seed − the epoch
// znode's czxid, so the first token after the seeding is about the seed;
// every later election E has a record, put by the first driver that
// needs a token of a znode created in E:
//
//	<root>/%epoch/<seed>/<E>   data: its base, in decimal
//
// That driver sets the base to its clock's time in microseconds less a
// zxid of E the server has returned (the new znode's czxid, or a later
// one of E it read with it). Within an election, zxids grow by one per
// write, slower than one per microsecond, so every token of E is within
// that read's round trip of the clock at the znode's creation: above the
// tokens of the elections before (no writes commit during an election)
// and never ahead of the clock by 2³² per election. An epoch deleted and
// seeded again from the clock (below) is then above every earlier token.
//
// The epoch is put, if absent, by the first driver that needs a token,
// together with its mark, a child named by its seed, in one
// multi-operation:
//
//	<root>/%epoch/<seed>   no data: the epoch's mark, parent of the records
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
// clock of a machine that seeds an epoch or records an election's base
// is not behind the earlier ones' by more than the time between the last
// token before and its seeding or record.
//
// An epoch seeded by a fencezk without records holds the bare seed: one
// base for every election, as it had. Its tokens may lead the clock by
// 2³² per election already, and a base from the clock would send them
// back, so it keeps that one base until it is deleted.

// epochName is the epoch znode's name under the root. An escaped key never
// holds "%" followed by a lower-case letter, so no key's queue has it.
const epochName = "%epoch"

// seedClock is the clock an epoch is seeded from; tests set it back.
var seedClock = time.Now

// epochRead, if set, runs after loadEpoch read an epoch and before it
// marks it: tests change the epoch there.
var epochRead func()

// electionsTag follows the seed in the data of an epoch that has a base
// per election. A fencezk without them fails to read it as a time, so
// it cannot issue tokens on one base beside drivers on many.
const electionsTag = " elections"

// epoch is the token epoch as one session read it.
type epoch struct {
	sid   int64  // the session that read it; 0: not read
	base  int64  // seed − the epoch znode's czxid: the base of its election
	czxid int64  // the epoch znode's
	mark  string // the path of its mark, which enqueues check
	// elections: a base per election (see above); false for an epoch
	// seeded without, which keeps base for every election.
	elections bool
}

// errEpochChanged: the epoch a token was to be read from was deleted
// (its mark is gone): read it again.
var errEpochChanged = errors.New("the token epoch changed")

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
		d.bases = nil
	}
	d.epochMu.Unlock()
}

// token returns the token of a znode created at zxid, which a session
// that read epoch e read from the server. seen are other zxids read
// with it (a parent's pzxid or mzxid): the latest of them in zxid's
// election, if the election has no base yet, brings its base closer to
// the clock. It fails with errEpochChanged if e's mark is gone.
func (d *Store) token(ctx context.Context, e epoch, zxid int64, seen ...int64) (int64, error) {
	el := zxid >> 32
	if !e.elections || el == e.czxid>>32 {
		return zxid + e.base, nil
	}
	d.epochMu.Lock()
	base, ok := d.bases[el]
	if d.epoch.mark != e.mark {
		ok = false // the cache is another epoch's
	}
	d.epochMu.Unlock()
	if ok {
		return zxid + base, nil
	}
	latest := zxid
	for _, z := range seen {
		if z>>32 == el && z > latest {
			latest = z
		}
	}
	base, err := d.electionBase(ctx, e, el, latest)
	if err != nil {
		return 0, err
	}
	d.epochMu.Lock()
	if d.epoch.mark == e.mark {
		if d.bases == nil {
			d.bases = make(map[int64]int64)
		}
		d.bases[el] = base
	}
	d.epochMu.Unlock()
	return zxid + base, nil
}

// electionBase reads the base of election el in epoch e, recording it if
// no driver has: the clock less latest, a zxid of el the server returned.
func (d *Store) electionBase(ctx context.Context, e epoch, el, latest int64) (int64, error) {
	path := e.mark + "/" + strconv.FormatInt(el, 10)
	for range 3 {
		var data []byte
		err := d.await(ctx, func() (err error) {
			data, _, err = d.conn.Get(path)
			return err
		}, nil)
		if err == nil {
			base, err := strconv.ParseInt(string(data), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("the token base %s holds %q, not a number: tokens cannot be issued (delete the token epoch %s with all under it, and fence seeds it again)", path, data, d.epochPath())
			}
			return base, nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return 0, fmt.Errorf("read the token base of election %d: %w", el, err)
		}
		base := seedClock().UnixMicro() - latest
		err = d.await(ctx, func() error {
			_, err := d.conn.Create(path, []byte(strconv.FormatInt(base, 10)), 0, d.acl)
			return err
		}, nil)
		switch {
		case err == nil:
			return base, nil
		case errors.Is(err, zk.ErrNoNode):
			d.forgetEpoch(e)
			return 0, errEpochChanged // the mark is gone: the epoch with it
		case !errors.Is(err, zk.ErrNodeExists):
			return 0, fmt.Errorf("record the token base of election %d: %w", el, err)
		}
		// Recorded by another driver meanwhile: read it.
	}
	return 0, fmt.Errorf("the token base %s keeps vanishing", path)
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
			seed, elections := strings.CutSuffix(string(data), electionsTag)
			base, err := epochBase(path, seed, data, st)
			if err != nil {
				return epoch{}, err
			}
			mark := path + "/" + seed
			if epochRead != nil {
				epochRead()
			}
			switch ok, err := d.markEpoch(ctx, mark, st.Czxid); {
			case err != nil:
				return epoch{}, err
			case !ok:
				continue // the epoch changed since the read: read again
			}
			if sid == 0 || d.conn.SessionID() != sid {
				continue // read across a new session: read again in it
			}
			e := epoch{sid: sid, base: base, czxid: st.Czxid, mark: mark, elections: elections}
			d.epochMu.Lock()
			if d.epoch.mark != mark {
				d.bases = nil
			}
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
				&zk.CreateRequest{Path: path, Data: []byte(seed + electionsTag), Acl: d.acl},
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

// epochBase is the token base of the epoch znode at path, of seed (its
// data, less the tag of an epoch with a base per election) and stat st,
// in its own election.
func epochBase(path, seedText string, data []byte, st *zk.Stat) (int64, error) {
	seed, err := strconv.ParseInt(seedText, 10, 64)
	if err != nil || seed <= 0 {
		return 0, fmt.Errorf("the token epoch %s holds %q, not a time in microseconds: tokens cannot be issued (delete it with all under it, and fence seeds it again)", path, data)
	}
	if st.Version != 0 {
		return 0, fmt.Errorf("the token epoch %s was rewritten (version %d): fence writes it once; delete it with all under it, and fence seeds it again", path, st.Version)
	}
	return seed - st.Czxid, nil
}
