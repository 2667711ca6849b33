// Package fifo is the wait of stores that queue waiters as ordered
// entries (etcd by create revision, ZooKeeper by sequential znode): each
// waiter watches only the entry it waits for, usually its predecessor, and
// looks again whenever that one goes, until nothing is ahead of it. A
// release then wakes one waiter, not all of them.
//
// The store supplies its atomic operations through Queue; the loop, the
// order of its steps and the giving up on ctx are here.
package fifo

import "context"

// Queue is one waiting entry's view of its store's queue. E names an
// entry ahead of it (a key and its revision, a znode path).
type Queue[E any] interface {
	// Ahead returns the entry the waiting one must see gone before its
	// turn, false if none is left. It fails if the waiting entry itself
	// is gone (its session ended, someone deleted it).
	Ahead(ctx context.Context) (E, bool, error)
	// AwaitGone returns nil once e is gone, or may be gone (a broken
	// watch): Ahead is then asked again. It returns an error if the wait
	// must end (ctx, a lost session, a closed driver). A deletion of e
	// between Ahead and the start of the watch must not be missed.
	AwaitGone(ctx context.Context, e E) error
	// Confirm makes sure, once nothing is ahead, that the waiting entry
	// still holds its place (its session lives, a read was not stale)
	// before the turn is granted.
	Confirm(ctx context.Context) error
}

// WaitTurn returns nil once nothing is ahead of q's entry and Confirm
// agrees, or the first error of q's operations, or ctx's error.
func WaitTurn[E any](ctx context.Context, q Queue[E]) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		e, ok, err := q.Ahead(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return q.Confirm(ctx)
		}
		if err := q.AwaitGone(ctx, e); err != nil {
			return err
		}
	}
}
