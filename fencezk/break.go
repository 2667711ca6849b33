package fencezk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/fencing/fence"
)

var _ fence.Breaker = (*Store)(nil)

// Break implements fence.Breaker: it reads key's queue and deletes the
// holder's znode if its token (czxid plus the epoch's base) is token (any, for 0). A
// znode's name is unique to one acquisition (its sequence is never
// reused), so deleting that name deletes exactly the lease with that
// token, or nothing if it has gone since; then Break looks again. The
// holder's watch reports the loss; the next waiter takes the key.
func (d *Store) Break(ctx context.Context, key string, token int64) (fence.Holder, error) {
	parent := d.KeyPath(key)
	for {
		ep, err := d.tokenBase(ctx)
		if err != nil {
			return fence.Holder{}, fmt.Errorf("fencezk: break %q: %w", key, err)
		}
		var (
			kids []string
			pst  *zk.Stat
		)
		err = d.await(ctx, func() (err error) {
			kids, pst, err = d.conn.Children(parent)
			return err
		}, nil)
		if errors.Is(err, zk.ErrNoNode) {
			return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
		}
		if err != nil {
			return fence.Holder{}, fmt.Errorf("fencezk: break %q: %w", key, err)
		}
		q := queue(kids)
		if len(q) == 0 {
			return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
		}
		path := parent + "/" + q[0].name
		var (
			data []byte
			st   *zk.Stat
		)
		err = d.await(ctx, func() (err error) {
			data, st, err = d.conn.Get(path)
			return err
		}, nil)
		if errors.Is(err, zk.ErrNoNode) {
			continue // just left: look again
		}
		if err != nil {
			return fence.Holder{}, fmt.Errorf("fencezk: break %q: %w", key, err)
		}
		if !d.sameSession(ep) {
			continue // the server may have lost its data: read the epoch again
		}
		held, err := d.token(ctx, ep, st.Czxid, pst.Pzxid, pst.Mzxid)
		if errors.Is(err, errEpochChanged) {
			continue // read the new epoch
		}
		if err != nil {
			return fence.Holder{}, fmt.Errorf("fencezk: break %q: %w", key, err)
		}
		h := fence.Holder{Key: key, Token: held}
		var e entry
		if json.Unmarshal(data, &e) == nil {
			h.Owner, h.Meta = e.Owner, e.Meta
		}
		if token != 0 && h.Token != token {
			return fence.Holder{}, &fence.HeldError{Key: key, Holder: &h}
		}
		err = d.await(ctx, func() error { return d.conn.Delete(path, st.Version) }, nil)
		if errors.Is(err, zk.ErrNoNode) {
			continue // released or expired since the read: look again
		}
		if err != nil {
			return fence.Holder{}, fmt.Errorf("fencezk: break %q: %w", key, err)
		}
		return h, nil
	}
}
