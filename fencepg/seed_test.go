package fencepg_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencepg"
)

// A failover to an asynchronous replica can lose the last token bumps, and
// a restored backup has older counters: here every counter row is deleted
// behind fence's back, or set back to 1 (so that the next token comes from
// the bump of an existing row, not from a new one). The next token of
// every mode and kind must still be above every token handed out before,
// because tokens are seeded from the server's clock.
func TestTokensSurviveLostCounters(t *testing.T) {
	_, pool := server(t)
	ctx := ctxFor(t)
	lease, _ := leaseClient(t, pool)
	session := sessionClient(t, pool)
	locker, err := fencepg.NewTxLocker()
	if err != nil {
		t.Fatal(err)
	}
	viaTx := func(ctx context.Context) (int64, error) {
		var token int64
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
			token, err = locker.Lock(ctx, tx, "tx")
			return err
		})
		return token, err
	}
	viaLease := func(acquire func(context.Context, ...fence.AcquireOption) (*fence.Lease, error)) func(context.Context) (int64, error) {
		return func(ctx context.Context) (int64, error) {
			l, err := acquire(ctx)
			if err != nil {
				return 0, err
			}
			return l.Token(), l.Release(ctx)
		}
	}
	modes := []struct {
		name    string
		acquire func(context.Context) (int64, error)
	}{
		{"lease lock", viaLease(func(ctx context.Context, o ...fence.AcquireOption) (*fence.Lease, error) {
			return lease.TryAcquire(ctx, "lock", o...)
		})},
		{"lease semaphore", viaLease(lease.Semaphore("sem", 2).TryAcquire)},
		{"session lock", viaLease(func(ctx context.Context, o ...fence.AcquireOption) (*fence.Lease, error) {
			return session.TryAcquire(ctx, "lock", o...)
		})},
		{"session writer", viaLease(session.RWMutex("rw").TryAcquireWrite)},
		{"session reader", viaLease(session.RWMutex("rw").TryAcquireRead)},
		{"transaction", viaTx},
	}
	last := make([]int64, len(modes))
	for round := range 4 {
		for i, m := range modes {
			token, err := m.acquire(ctx)
			if err != nil {
				t.Fatalf("%s, round %d: %v", m.name, round, err)
			}
			if token <= last[i] {
				t.Errorf("%s, round %d: token %d not above the earlier %d", m.name, round, token, last[i])
			}
			last[i] = token
		}
		if round%2 == 0 {
			// The counters go back to nothing, as on a replica that
			// never saw them.
			exec(t, pool, `DELETE FROM fence_locks`)
			exec(t, pool, `DELETE FROM fence_tokens`)
			exec(t, pool, `DELETE FROM fence_kinds`)
		} else {
			// The counters go back to an old value, as in a restored
			// backup.
			exec(t, pool, `UPDATE fence_locks SET token = 1`)
			exec(t, pool, `UPDATE fence_tokens SET token = 1`)
			exec(t, pool, `UPDATE fence_kinds SET token = 1`)
		}
	}
}
