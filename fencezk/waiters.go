package fencezk

import (
	"context"
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/fencing/fence"
)

var _ fence.WaiterCounter = (*Store)(nil)

// Waiters implements fence.WaiterCounter for locks: every entry of the
// key's queue behind the holder's waits for it. A contender that stopped
// waiting has deleted its entry, or its session's expiry will.
func (d *Store) Waiters(ctx context.Context, key string) (int, error) {
	var kids []string
	err := d.await(ctx, func() (err error) {
		kids, _, err = d.conn.Children(d.KeyPath(key))
		return err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fencezk: count waiters of %q: %w", key, err)
	}
	return max(len(queue(kids))-1, 0), nil
}
