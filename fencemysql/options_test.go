package fencemysql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemysql"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// optClient is a Client over a driver made with opts on db.
func optClient(t *testing.T, db *sql.DB, opts ...fencemysql.Option) (*fence.Client, *fencemysql.Store) {
	t.Helper()
	d, err := fencemysql.New(db, opts...)
	if err != nil {
		t.Fatal(err)
	}
	c := fence.New(d)
	t.Cleanup(func() {
		_ = c.Close(context.Background())
		_ = d.Close()
	})
	return c, d
}

func tableExists(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	var n int
	err := db.QueryRowContext(ctxFor(t), `SELECT count(*) FROM information_schema.tables
		WHERE table_schema = DATABASE() AND table_name = ?`, name).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// WithPrefix: the driver's lock names start with the prefix, and a driver
// with another prefix does not see its locks.
func TestWithPrefix(t *testing.T) {
	ctx := ctxFor(t)
	_, db := server(t)
	app, _ := optClient(t, db, fencemysql.WithPrefix("app"))
	other, _ := optClient(t, db)
	l, err := app.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	var holder sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, fencemysql.LockName("app", "k")).Scan(&holder); err != nil || !holder.Valid {
		t.Errorf("lock %q not held (%v)", fencemysql.LockName("app", "k"), err)
	}
	l2, err := other.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("a driver with the default prefix: %v; want its own lock", err)
	}
	_ = l2.Release(ctx)
	again, _ := optClient(t, db, fencemysql.WithPrefix("app"))
	if _, err := again.TryAcquire(ctx, "k"); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("a second driver with the same prefix: %v; want ErrHeld", err)
	}
	_ = l.Release(ctx)
}

// WithTable: Setup creates the named counter table, not the default one,
// and tokens are counted in it.
func TestWithTable(t *testing.T) {
	ctx := ctxFor(t)
	db := openDB(t, testserver.MariaDB(t).DSN())
	c, d := optClient(t, db, fencemysql.WithTable("app_tokens"))
	if err := d.Setup(ctx); err != nil {
		t.Fatal(err)
	}
	if !tableExists(t, db, "app_tokens") || tableExists(t, db, fencemysql.DefaultTable) {
		t.Fatalf("after Setup: app_tokens %v, %s %v; want only app_tokens",
			tableExists(t, db, "app_tokens"), fencemysql.DefaultTable, tableExists(t, db, fencemysql.DefaultTable))
	}
	l, err := c.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	var token int64
	if err := db.QueryRowContext(ctx, `SELECT token FROM app_tokens WHERE lock_key = 'k'`).Scan(&token); err != nil || token != l.Token() {
		t.Errorf("app_tokens holds token %d for k (%v); want the lease's %d", token, err, l.Token())
	}
}

// WithAutoSetup: without tables, the driver fails unless it may create
// them, which it then does on first use.
func TestWithAutoSetup(t *testing.T) {
	ctx := ctxFor(t)
	db := openDB(t, testserver.MariaDB(t).DSN())
	plain, _ := optClient(t, db)
	if l, err := plain.TryAcquire(ctx, "k"); err == nil || errors.Is(err, fence.ErrHeld) {
		_ = l.Release(ctx)
		t.Fatalf("no table, no WithAutoSetup: TryAcquire = %v; want an error", err)
	}
	auto, _ := optClient(t, db, fencemysql.WithAutoSetup())
	l, err := auto.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("WithAutoSetup: %v", err)
	}
	_ = l.Release(ctx)
	if !tableExists(t, db, fencemysql.DefaultTable) {
		t.Errorf("WithAutoSetup did not create %s", fencemysql.DefaultTable)
	}
}
