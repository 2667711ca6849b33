package fenceetcd

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Tokens are a create revision plus the base of the token epoch, an entry
// beside the queues:
//
//	<prefix>/%epoch   value: a time in microseconds since 1970 (the seed)
//
// base = seed − the epoch entry's create revision, so the first token
// after the seeding is about the seed, and tokens then grow by revisions:
// a holder entry created at revision r, t microseconds after the seeding,
// gets seed + (r − the epoch's revision), at most seed + t as long as the
// cluster makes fewer than one revision per microsecond (etcd's writes are
// in the tens of thousands per second). So every token is at most the
// time it was issued, in microseconds.
//
// The epoch entry is put, if absent, by the first driver that needs a
// token, and read in the same transaction as every grant, so a token is
// always computed with the epoch that was there when its entry was
// granted. A cluster that lost its data (every member's data directory
// gone) or a prefix deleted behind fence's back loses the epoch with the
// entries; the next driver seeds it again, later, so the new tokens are
// above every earlier one, each of which was at most its issue time.
// The one assumption (docs/design.md section 3, rule 9): the clock of
// the machine that seeds is not behind the clocks of earlier seeders by
// more than the time between the last token of the old epoch and the new
// seeding.

// epochKey is the epoch entry's name under the prefix. An escaped key
// never holds "%" followed by a lower-case letter, so no key's queue can
// have this name.
const epochKey = "%epoch"

// seedClock is the clock an epoch is seeded from; tests set it back.
var seedClock = time.Now

// epochName is the etcd key of the token epoch.
func (d *Store) epochName() string { return d.root + epochKey }

// epochGet reads the token epoch. A transaction that grants or reports a
// token has it as its last operation (see baseIn).
func (d *Store) epochGet() clientv3.Op { return clientv3.OpGet(d.epochName()) }

// baseIn returns the token base from the epoch read by resp's last
// operation (an epochGet), seeding the epoch if it was absent.
func (d *Store) baseIn(ctx context.Context, resp *clientv3.TxnResponse) (int64, error) {
	if kvs := rangeOf(resp, len(resp.Responses)-1); len(kvs) > 0 {
		return epochBase(kvs[0])
	}
	return d.seed(ctx)
}

// baseFor returns the token base for a read of a key's first entry and
// its delay entry (resp's operations 0 and 1, then an epochGet): 0, with
// no epoch seeded, when both are empty and no token is reported.
func (d *Store) baseFor(ctx context.Context, resp *clientv3.TxnResponse) (int64, error) {
	if len(rangeOf(resp, 0)) == 0 && len(rangeOf(resp, 1)) == 0 {
		return 0, nil
	}
	return d.baseIn(ctx, resp)
}

// seed puts the token epoch if it is absent, and returns its base.
func (d *Store) seed(ctx context.Context) (int64, error) {
	name := d.epochName()
	for {
		now := seedClock().UnixMicro()
		resp, err := d.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(name), "=", 0)).
			Then(clientv3.OpPut(name, strconv.FormatInt(now, 10))).
			Else(clientv3.OpGet(name)).
			Commit()
		if err != nil {
			return 0, fmt.Errorf("seed the token epoch: %w", err)
		}
		if resp.Succeeded {
			return now - resp.Header.Revision, nil
		}
		if kvs := rangeOf(resp, 0); len(kvs) > 0 {
			return epochBase(kvs[0])
		}
		// Deleted again between the compare and the read: seed anew.
	}
}

// epochBase is the token base of the epoch entry kv.
func epochBase(kv *mvccpb.KeyValue) (int64, error) {
	seed, err := strconv.ParseInt(string(kv.Value), 10, 64)
	if err != nil || seed <= 0 {
		return 0, fmt.Errorf("the token epoch %s holds %q, not a time in microseconds: tokens cannot be issued (delete it, and fence seeds it again)", kv.Key, kv.Value)
	}
	return seed - kv.CreateRevision, nil
}
