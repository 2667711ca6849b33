package drivertest_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencesql"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// WithTable: the guard creates, reads and writes the table it is given,
// schema-qualified where the dialect has schemas, and a guard on another
// table keeps its own highest tokens.
func TestWithTable(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		dsn := "file:" + filepath.Join(t.TempDir(), "db.sqlite") + "?_pragma=busy_timeout(20000)"
		withTable(t, fencesql.SQLite, open(t, "sqlite", dsn), "main.app_guard", "", "SELECT token FROM main.app_guard WHERE resource = ?")
	})
	t.Run("postgres", func(t *testing.T) {
		db := open(t, "pgx", testserver.Postgres(t).DSN())
		withTable(t, fencesql.Postgres, db, "app.guard", "CREATE SCHEMA IF NOT EXISTS app", "SELECT token FROM app.guard WHERE resource = $1")
	})
	t.Run("mysql", func(t *testing.T) {
		db := open(t, "mysql", testserver.MariaDB(t).DSN())
		withTable(t, fencesql.MySQL, db, "app_guard", "", "SELECT token FROM app_guard WHERE resource = ?")
	})
}

func withTable(t *testing.T, d fencesql.Dialect, db fencesql.Querier, table, prepare, read string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if prepare != "" {
		if _, err := db.ExecContext(ctx, prepare); err != nil {
			t.Fatal(err)
		}
	}
	g, err := fencesql.New(d, fencesql.WithTable(table))
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Setup(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := g.Admit(ctx, db, "r", 9); err != nil {
		t.Fatal(err)
	}
	var got int64
	if err := db.QueryRowContext(ctx, read, "r").Scan(&got); err != nil || got != 9 {
		t.Errorf("%s holds token %d (%v); want 9", table, got, err)
	}
	if err := g.Admit(ctx, db, "r", 8); !errors.Is(err, fence.ErrStale) {
		t.Errorf("token 8 after 9 on %s: %v; want ErrStale", table, err)
	}
	def, _ := fencesql.New(d)
	if err := def.Setup(ctx, db); err != nil {
		t.Fatal(err)
	}
	if err := def.Admit(ctx, db, "r", 8); err != nil {
		t.Errorf("the default table's guard refused token 8: %v; want it independent of %s", err, table)
	}
}
