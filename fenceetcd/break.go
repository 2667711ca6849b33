package fenceetcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence"
)

var _ fence.Breaker = (*Store)(nil)

// Break implements fence.Breaker: it reads key's holder entry and, if
// its token (create revision) is token (any, for 0), deletes it in a
// transaction that compares the entry's create revision, so that it
// deletes exactly the lease with that token or nothing. The next
// holder's token is a later revision. The broken holder's watch on its
// entry reports the loss; the next waiter in the queue takes the key.
func (d *Store) Break(ctx context.Context, key string, token int64) (fence.Holder, error) {
	for {
		resp, err := d.cli.Get(ctx, d.dir(key), clientv3.WithFirstCreate()...)
		if err != nil {
			return fence.Holder{}, fmt.Errorf("fenceetcd: break %q: %w", key, err)
		}
		h, ok := holder(key, resp.Kvs)
		switch {
		case !ok:
			return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
		case token != 0 && h.Token != token:
			return fence.Holder{}, &fence.HeldError{Key: key, Holder: &h}
		}
		name := string(resp.Kvs[0].Key)
		tx, err := d.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(name), "=", h.Token)).
			Then(clientv3.OpDelete(name)).
			Commit()
		if err != nil {
			return fence.Holder{}, fmt.Errorf("fenceetcd: break %q: %w", key, err)
		}
		if tx.Succeeded {
			return h, nil
		}
		// The entry went (released, expired) since it was read: look again.
	}
}
