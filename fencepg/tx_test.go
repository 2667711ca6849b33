package fencepg_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencepg"
	"github.com/fencing/fence/internal/testkit/obstest"
)

func TestTxLocker(t *testing.T) {
	_, pool := server(t)
	ctx := ctxFor(t)
	locker, err := fencepg.NewTxLocker()
	if err != nil {
		t.Fatal(err)
	}
	tx1, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx1.Rollback(ctx)
	t1, err := locker.Lock(ctx, tx1, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locker.TryLock(ctx, tx1, "job"); !errors.Is(err, fencepg.ErrReentrant) {
		t.Errorf("TryLock of a key the transaction holds: %v; want ErrReentrant", err)
	}
	if _, err := locker.Lock(ctx, tx1, "job"); !errors.Is(err, fencepg.ErrReentrant) {
		t.Errorf("Lock of a key the transaction holds: %v; want ErrReentrant", err)
	}

	// Another transaction cannot take it, nor can a session-mode lease.
	tx2, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := locker.TryLock(ctx, tx2, "job"); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("TryLock held by another transaction: %v; want ErrHeld", err)
	}
	c := sessionClient(t, pool)
	if _, err := c.TryAcquire(ctx, "job"); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("session TryAcquire of a key locked in a transaction: %v; want ErrHeld", err)
	}

	// A waiting Lock gets it when the holder commits, with a higher token.
	got := make(chan int64, 1)
	go func() {
		tok, err := locker.Lock(ctx, tx2, "job")
		if err != nil {
			t.Errorf("waiting Lock: %v", err)
		}
		got <- tok
	}()
	select {
	case tok := <-got:
		t.Fatalf("Lock granted (token %d) while another transaction holds the key", tok)
	case <-time.After(300 * time.Millisecond):
	}
	if err := tx1.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	var t2 int64
	select {
	case t2 = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("waiting Lock not granted after the holder committed")
	}
	if t2 <= t1 {
		t.Errorf("token %d after %d", t2, t1)
	}
	if err := tx2.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	// Session mode and transaction mode share the counter.
	l, err := c.TryAcquire(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() <= t1 {
		t.Errorf("session token %d not above the committed transaction token %d", l.Token(), t1)
	}
	tx3, _ := pool.Begin(ctx)
	if _, err := locker.TryLock(ctx, tx3, "job"); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("TryLock of a key held by a session lease: %v; want ErrHeld", err)
	}
	_ = tx3.Rollback(ctx)
	_ = l.Release(ctx)

	// A cancelled wait leaves the transaction unusable but no lock behind.
	tx4, _ := pool.Begin(ctx)
	defer tx4.Rollback(ctx)
	if _, err := locker.Lock(ctx, tx4, "bad\x00key"); !errors.Is(err, fence.ErrInvalidKey) {
		t.Errorf("Lock with a NUL key: %v; want ErrInvalidKey", err)
	}
}

// Transaction mode under contention: many transactions lock one key,
// write under it and commit; tokens come out strictly increasing in commit
// order and no two transactions are ever inside at once.
func TestTxLockerMutualExclusion(t *testing.T) {
	_, pool := server(t)
	ctx := ctxFor(t)
	locker, _ := fencepg.NewTxLocker()
	exec(t, pool, `CREATE TABLE log (n serial PRIMARY KEY, token bigint NOT NULL)`)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 5 {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					tok, err := locker.Lock(ctx, tx, "job")
					if err != nil {
						return err
					}
					_, err = tx.Exec(ctx, `INSERT INTO log (token) VALUES ($1)`, tok)
					return err
				})
				if err != nil {
					t.Errorf("transaction: %v", err)
				}
			}
		})
	}
	wg.Wait()
	rows, _ := pool.Query(ctx, `SELECT token FROM log ORDER BY n`)
	tokens, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	if len(tokens) != 40 {
		t.Errorf("%d writes; want 40", len(tokens))
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens not increasing in write order: %v", tokens)
		}
	}
}

// Many concurrent writers with interleaved tokens guard their writes with
// the pgx Guard: the table ends with the value of the highest token, and
// every write with a lower token after it was refused.
func TestGuardConcurrentWriters(t *testing.T) {
	_, pool := server(t)
	ctx := ctxFor(t)
	exec(t, pool, `CREATE TABLE doc (id int PRIMARY KEY, body text NOT NULL, token bigint NOT NULL)`)
	exec(t, pool, `INSERT INTO doc VALUES (1, 'empty', 0)`)
	exec(t, pool, `CREATE TABLE wlog (n serial PRIMARY KEY, resource text NOT NULL, token bigint NOT NULL)`)
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			var opts []fencepg.Option
			if strict {
				opts = append(opts, fencepg.Strict())
			}
			g, err := fencepg.NewGuard(opts...)
			if err != nil {
				t.Fatal(err)
			}
			resource := fmt.Sprintf("doc-%v", strict)
			type attempt struct {
				token    int64
				accepted bool
			}
			var (
				mu       sync.Mutex
				attempts []attempt
				wg       sync.WaitGroup
			)
			const writers, each = 8, 12
			for w := range writers {
				wg.Go(func() {
					for i := range each {
						// Interleaved: writer w writes tokens w+1, w+1+writers,
						// ..., each pair swapped, racing the others.
						tok := int64(1 + w + writers*(i^1))
						err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
							if err := g.Admit(ctx, tx, resource, tok); err != nil {
								return err
							}
							_, err := tx.Exec(ctx, `UPDATE doc SET body = $1, token = $2 WHERE id = 1`,
								fmt.Sprintf("written with %d", tok), tok)
							if err == nil {
								_, err = tx.Exec(ctx, `INSERT INTO wlog (resource, token) VALUES ($1, $2)`, resource, tok)
							}
							return err
						})
						var stale *fence.StaleError
						switch {
						case err == nil:
						case errors.As(err, &stale) && errors.Is(err, fence.ErrStale):
						default:
							t.Errorf("write with token %d: %v", tok, err)
						}
						mu.Lock()
						attempts = append(attempts, attempt{tok, err == nil})
						mu.Unlock()
					}
				})
			}
			wg.Wait()
			var body string
			var final int64
			if err := pool.QueryRow(ctx, `SELECT body, token FROM doc WHERE id = 1`).Scan(&body, &final); err != nil {
				t.Fatal(err)
			}
			const highest = writers * each
			if final != highest || body != fmt.Sprintf("written with %d", highest) {
				t.Errorf("final row: %q token %d; want the write of the highest token %d", body, final, highest)
			}
			// The guard row serializes the writes, so the log's order is the
			// order in which they were admitted: it never goes down, which
			// means every lower token after the highest was refused.
			rows, _ := pool.Query(ctx, `SELECT token FROM wlog WHERE resource = $1 ORDER BY n`, resource)
			logged, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				t.Fatal(err)
			}
			accepted := 0
			for _, a := range attempts {
				if a.accepted {
					accepted++
				}
			}
			if len(logged) != accepted || logged[len(logged)-1] != highest {
				t.Errorf("%d writes logged, %d accepted, last %v; want the highest %d last", len(logged), accepted, logged[len(logged)-1:], highest)
			}
			for i := 1; i < len(logged); i++ {
				if logged[i] < logged[i-1] || strict && logged[i] == logged[i-1] {
					t.Fatalf("admitted tokens went down (strict=%v): %v", strict, logged)
				}
			}
			refused := len(attempts) - accepted
			t.Logf("%d writes accepted, %d refused as stale", accepted, refused)
			if refused == 0 {
				t.Errorf("no stale write refused: the interleaving did not test the guard")
			}
			if err := g.Admit(ctx, pool, resource, 0); !errors.Is(err, fence.ErrInvalidToken) {
				t.Errorf("Admit of token 0: %v; want ErrInvalidToken", err)
			}
			err = g.Admit(ctx, pool, resource, highest)
			if strict && !errors.Is(err, fence.ErrStale) {
				t.Errorf("strict guard: Admit of the highest token again: %v; want ErrStale", err)
			}
			if !strict && err != nil {
				t.Errorf("Admit of the highest token again: %v; want nil (token >= highest)", err)
			}
		})
	}
}

// With WithGuardMetrics, admissions and stale refusals are reported.
func TestGuardMetrics(t *testing.T) {
	_, pool := server(t)
	ctx := ctxFor(t)
	var rec obstest.Recorder
	g, err := fencepg.NewGuard(fencepg.WithGuardMetrics(&rec))
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []int64{9, 9, 8, 0} {
		g.On(pool).Admit(ctx, "metrics", tok)
	}
	if admitted, refused := rec.GuardCounts(); admitted != 2 || refused != 1 {
		t.Errorf("guard decisions: %d admitted, %d refused; want 2, 1 (the invalid token is not reported)", admitted, refused)
	}
}
