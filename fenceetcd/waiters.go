package fenceetcd

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence"
)

var _ fence.WaiterCounter = (*Store)(nil)

// Waiters implements fence.WaiterCounter for locks, in one count-only
// range request: every entry of the key's queue behind the holder's waits
// for it. A contender that stopped waiting has deleted its entry, or its
// waiter lease's expiry will, within seconds (see Store.waitSession).
func (d *Store) Waiters(ctx context.Context, key string) (int, error) {
	resp, err := d.cli.Get(ctx, d.dir(key), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("fenceetcd: count waiters of %q: %w", key, err)
	}
	return max(int(resp.Count)-1, 0), nil
}
