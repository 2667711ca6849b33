package fencepg_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencepg"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// appTables are non-default names, in a schema of their own.
var appTables = fencepg.Tables{Locks: "app.locks", Tokens: "app.tokens", Guard: "app.guard", Kinds: "app.kinds"}

// bareServer is a server without fencepg's tables, and with the schema
// app.
func bareServer(t *testing.T) *pgxpool.Pool {
	pool := openPool(t, testserver.Postgres(t).DSN())
	exec(t, pool, `CREATE SCHEMA IF NOT EXISTS app`)
	return pool
}

// count returns the rows of table.
func count(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctxFor(t), `SELECT count(*) FROM `+table).Scan(&n); err != nil {
		t.Fatalf("count %s: %v", table, err)
	}
	return n
}

// exists tells whether table exists.
func exists(t *testing.T, pool *pgxpool.Pool, table string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(ctxFor(t), `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// WithTables: Setup creates the named tables and no default one, and every
// mode (lease, session, transaction, guard, semaphore) works in them.
func TestWithTables(t *testing.T) {
	ctx := ctxFor(t)
	pool := bareServer(t)
	opt := fencepg.WithTables(appTables)
	if err := fencepg.Setup(ctx, pool, opt); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{appTables.Locks, appTables.Tokens, appTables.Guard, appTables.Kinds} {
		if !exists(t, pool, name) {
			t.Errorf("Setup did not create %s", name)
		}
	}
	for _, name := range []string{fencepg.DefaultLocksTable, fencepg.DefaultTokensTable, fencepg.DefaultGuardTable, fencepg.DefaultKindsTable} {
		if exists(t, pool, name) {
			t.Errorf("Setup created the default table %s", name)
		}
	}

	lease, err := fencepg.NewLeaseStore(pool, opt)
	if err != nil {
		t.Fatal(err)
	}
	lc := fence.New(lease)
	defer lc.Close(ctx)
	l, err := lc.TryAcquire(ctx, "lease-key")
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, appTables.Locks+` WHERE key = 'lease-key'`); n != 1 {
		t.Errorf("%s has %d rows for lease-key; want 1", appTables.Locks, n)
	}
	_ = l.Release(ctx)
	sem, err := lc.Semaphore("sem-key", 2).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, appTables.Kinds+` WHERE key = 'sem-key'`); n == 0 {
		t.Errorf("%s has no rows for sem-key", appTables.Kinds)
	}
	_ = sem.Release(ctx)

	session, err := fencepg.NewSessionStore(pool, opt)
	if err != nil {
		t.Fatal(err)
	}
	sc := fence.New(session)
	defer sc.Close(ctx)
	s, err := sc.TryAcquire(ctx, "session-key")
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, appTables.Tokens+` WHERE key = 'session-key'`); n != 1 {
		t.Errorf("%s has %d rows for session-key; want 1", appTables.Tokens, n)
	}
	_ = s.Release(ctx)

	txl, err := fencepg.NewTxLocker(opt)
	if err != nil {
		t.Fatal(err)
	}
	g, err := fencepg.NewGuard(opt)
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		token, err := txl.Lock(ctx, tx, "tx-key")
		if err != nil {
			return err
		}
		return g.Admit(ctx, tx, "resource", token)
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := count(t, pool, appTables.Tokens+` WHERE key = 'tx-key'`); n != 1 {
		t.Errorf("%s has %d rows for tx-key; want 1", appTables.Tokens, n)
	}
	if n := count(t, pool, appTables.Guard+` WHERE resource = 'resource'`); n != 1 {
		t.Errorf("%s has %d rows for resource; want 1", appTables.Guard, n)
	}
}

// WithAutoSetup: a driver creates its tables before its first operation;
// without it, the operation fails on the missing table.
func TestWithAutoSetup(t *testing.T) {
	ctx := ctxFor(t)
	pool := bareServer(t)
	for _, mode := range []struct {
		name string
		open func(...fencepg.Option) (fence.Driver, error)
	}{
		{"lease", func(o ...fencepg.Option) (fence.Driver, error) { return fencepg.NewLeaseStore(pool, o...) }},
		{"session", func(o ...fencepg.Option) (fence.Driver, error) { return fencepg.NewSessionStore(pool, o...) }},
	} {
		t.Run(mode.name, func(t *testing.T) {
			tables := fencepg.WithTables(fencepg.Tables{Locks: "app." + mode.name + "_locks", Tokens: "app." + mode.name + "_tokens"})
			plain, err := mode.open(tables)
			if err != nil {
				t.Fatal(err)
			}
			c := fence.New(plain)
			defer c.Close(ctx)
			if l, err := c.TryAcquire(ctx, "k"); err == nil || errors.Is(err, fence.ErrHeld) {
				_ = l.Release(ctx)
				t.Fatalf("no tables, no WithAutoSetup: TryAcquire = %v; want an error", err)
			}
			auto, err := mode.open(tables, fencepg.WithAutoSetup())
			if err != nil {
				t.Fatal(err)
			}
			ac := fence.New(auto)
			defer ac.Close(ctx)
			l, err := ac.TryAcquire(ctx, "k")
			if err != nil {
				t.Fatalf("WithAutoSetup: %v", err)
			}
			_ = l.Release(ctx)
		})
	}
}

// Strict: a strict guard refuses a token equal to the highest admitted,
// which the default guard admits.
func TestStrict(t *testing.T) {
	ctx := ctxFor(t)
	_, pool := server(t)
	def, err := fencepg.NewGuard()
	if err != nil {
		t.Fatal(err)
	}
	strict, err := fencepg.NewGuard(fencepg.Strict())
	if err != nil {
		t.Fatal(err)
	}
	if err := def.On(pool).Admit(ctx, "r", 5); err != nil {
		t.Fatal(err)
	}
	if err := def.On(pool).Admit(ctx, "r", 5); err != nil {
		t.Errorf("default guard, token 5 again: %v; want admitted", err)
	}
	err = strict.On(pool).Admit(ctx, "r", 5)
	var stale *fence.StaleError
	if !errors.As(err, &stale) || !stale.Strict || stale.Highest != 5 {
		t.Errorf("strict guard, token 5 again: %v; want a strict *fence.StaleError with highest 5", err)
	}
	if err := strict.On(pool).Admit(ctx, "r", 6); err != nil {
		t.Errorf("strict guard, token 6: %v", err)
	}
}
