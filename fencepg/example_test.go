package fencepg_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencepg"
)

// Lease mode: acquire a key, do the work under the lease's context, and
// send its token with the writes it protects.
func ExampleNewLeaseStore() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if err := fencepg.Setup(ctx, pool); err != nil { // once, or in a migration
		log.Fatal(err)
	}
	drv, err := fencepg.NewLeaseStore(pool)
	if err != nil {
		log.Fatal(err)
	}
	defer drv.Close()

	c := fence.New(drv, fence.WithTTL(30*time.Second))
	lease, err := c.Acquire(ctx, "nightly-invoices")
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Release(context.Background())
	fmt.Println("token", lease.Token())
	// ... work under lease.Context(), sending lease.Token() with each write ...
}

// Transaction mode with a guard: the lock, the token, the guard's check
// and the write all commit together.
func ExampleTxLocker() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db.internal/app")
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	locker, _ := fencepg.NewTxLocker()
	guard, _ := fencepg.NewGuard()

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		token, err := locker.Lock(ctx, tx, "account/42")
		if err != nil {
			return err
		}
		if err := guard.Admit(ctx, tx, "account/42", token); err != nil {
			return err // errors.Is(err, fence.ErrStale)
		}
		_, err = tx.Exec(ctx, `UPDATE accounts SET balance = balance - 10 WHERE id = 42`)
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
}
