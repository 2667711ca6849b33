package fenceetcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence"
)

var _ fence.Breaker = (*Store)(nil)

// Break implements fence.Breaker: it reads key's holder entry and, if
// its token is token (any, for 0), deletes it in a transaction that
// compares the entry's create revision, so that it deletes exactly the
// lease with that token or nothing. The next holder's token is a later
// revision, plus the same base. The broken holder's watch on its
// entry reports the loss; the next waiter in the queue takes the key.
//
// A break deletes the holder's lock-delay entry with it, and a break of
// a lost holder in its lock-delay deletes the delay entry alone (if it
// is unchanged since it was read): either frees the key at once.
func (d *Store) Break(ctx context.Context, key string, token int64) (fence.Holder, error) {
	delay := d.delayName(key)
	for {
		resp, err := d.cli.Txn(ctx).
			Then(clientv3.OpGet(d.dir(key), clientv3.WithFirstCreate()...), clientv3.OpGet(delay), d.epochGet()).
			Commit()
		if err != nil {
			return fence.Holder{}, fmt.Errorf("fenceetcd: break %q: %w", key, err)
		}
		kvs, lost := rangeOf(resp, 0), rangeOf(resp, 1)
		base, err := d.baseFor(ctx, resp)
		if err != nil {
			return fence.Holder{}, fmt.Errorf("fenceetcd: break %q: %w", key, err)
		}
		var (
			cmps []clientv3.Cmp
			dels []clientv3.Op
		)
		if len(lost) > 0 {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(delay), "=", lost[0].ModRevision))
			dels = append(dels, clientv3.OpDelete(delay))
		}
		h, ok := holder(key, kvs, base)
		switch {
		case ok:
			name := string(kvs[0].Key)
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(name), "=", kvs[0].CreateRevision))
			dels = append(dels, clientv3.OpDelete(name))
		case len(lost) > 0:
			h = lostHolder(key, lost[0], base)
		default:
			return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
		}
		if token != 0 && h.Token != token {
			return fence.Holder{}, &fence.HeldError{Key: key, Holder: &h}
		}
		tx, err := d.cli.Txn(ctx).If(cmps...).Then(dels...).Commit()
		if err != nil {
			return fence.Holder{}, fmt.Errorf("fenceetcd: break %q: %w", key, err)
		}
		if tx.Succeeded {
			return h, nil
		}
		// The entries changed (released, expired, moved) since they were
		// read: look again.
	}
}
