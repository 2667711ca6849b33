package drivertest_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testkit/leakcheck"
	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"
	_ "modernc.org/sqlite"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencesql"
	"github.com/fencing/fence/internal/testkit/obstest"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m, testserver.IgnoreLeaks()) }

func open(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestSQLite(t *testing.T) {
	dsn := "file:" + filepath.Join(t.TempDir(), "db.sqlite") + "?_pragma=busy_timeout(20000)&_pragma=journal_mode(wal)&_txlock=immediate"
	exercise(t, fencesql.SQLite, open(t, "sqlite", dsn))
}

func TestPostgres(t *testing.T) {
	srv := testserver.Postgres(t)
	exercise(t, fencesql.Postgres, open(t, "pgx", srv.DSN()))
}

func TestMySQL(t *testing.T) {
	srv := testserver.MariaDB(t)
	// clientFoundRows: see the fenced column check below and docs/guards.md.
	exercise(t, fencesql.MySQL, open(t, "mysql", srv.DSN()+"?clientFoundRows=true"))
}

// rebind turns ? placeholders into $n for PostgreSQL.
func rebind(d fencesql.Dialect, q string) string {
	if d != fencesql.Postgres {
		return q
	}
	var b strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func exercise(t *testing.T, d fencesql.Dialect, db *sql.DB) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.ExecContext(ctx, rebind(d, q), args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(`CREATE TABLE doc (id INTEGER PRIMARY KEY, body VARCHAR(100) NOT NULL, token BIGINT NOT NULL)`)
	exec(`CREATE TABLE wlog (resource VARCHAR(100) NOT NULL, seq BIGINT NOT NULL, token BIGINT NOT NULL)`)
	exec(`CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance BIGINT NOT NULL, fence BIGINT NOT NULL)`)

	t.Run("Setup", func(t *testing.T) {
		g, _ := fencesql.New(d)
		for range 2 {
			if err := g.Setup(ctx, db); err != nil {
				t.Fatalf("Setup (idempotent): %v", err)
			}
		}
		if _, err := fencesql.New(d, fencesql.WithTable("x; DROP TABLE doc")); !errors.Is(err, fence.ErrInvalidOption) {
			t.Errorf("bad table name: %v; want ErrInvalidOption", err)
		}
	})
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("ConcurrentWriters/strict=%v", strict), func(t *testing.T) {
			concurrentWriters(t, ctx, d, db, strict)
		})
	}
	t.Run("Metrics", func(t *testing.T) {
		var rec obstest.Recorder
		g, _ := fencesql.New(d, fencesql.WithMetrics(&rec))
		for _, tok := range []int64{5, 5, 4, 0} {
			g.On(db).Admit(ctx, "metrics", tok)
		}
		if admitted, refused := rec.GuardCounts(); admitted != 2 || refused != 1 {
			t.Errorf("guard decisions: %d admitted, %d refused; want 2, 1 (the invalid token is not reported)", admitted, refused)
		}
	})
	t.Run("Rules", func(t *testing.T) {
		g, _ := fencesql.New(d)
		sg, _ := fencesql.New(d, fencesql.Strict())
		on, son := g.On(db), sg.On(db)
		for _, tok := range []int64{0, -1} {
			if err := on.Admit(ctx, "r", tok); !errors.Is(err, fence.ErrInvalidToken) {
				t.Errorf("Admit(%d): %v; want ErrInvalidToken", tok, err)
			}
		}
		steps := []struct {
			g     fence.Guard
			tok   int64
			stale bool
		}{
			{on, 5, false}, {on, 5, false}, {on, 4, true}, {son, 5, true}, {son, 6, false}, {on, 6, false}, {on, 7, false}, {on, 1, true},
		}
		for i, s := range steps {
			err := s.g.Admit(ctx, "rules", s.tok)
			var stale *fence.StaleError
			switch {
			case s.stale && !(errors.Is(err, fence.ErrStale) && errors.As(err, &stale)):
				t.Errorf("step %d: Admit(%d): %v; want a *StaleError", i, s.tok, err)
			case s.stale && stale.Highest == 0:
				t.Errorf("step %d: StaleError without the highest token: %v", i, err)
			case !s.stale && err != nil:
				t.Errorf("step %d: Admit(%d): %v; want nil", i, s.tok, err)
			}
		}
	})
	t.Run("FencedColumn", func(t *testing.T) {
		// The copy-paste pattern of docs/guards.md: the fence column is
		// the guard; zero rows affected means stale.
		exec(`INSERT INTO accounts (id, balance, fence) VALUES (1, 100, 0)`)
		write := func(balance, token int64) bool {
			t.Helper()
			res, err := db.ExecContext(ctx, rebind(d, `UPDATE accounts SET balance = ?, fence = ? WHERE id = ? AND fence <= ?`),
				balance, token, 1, token)
			if err != nil {
				t.Fatal(err)
			}
			n, err := res.RowsAffected()
			if err != nil {
				t.Fatal(err)
			}
			return n == 1
		}
		for _, s := range []struct {
			balance, token int64
			ok             bool
		}{{150, 33, true}, {150, 33, true}, {90, 34, true}, {200, 33, false}, {80, 34, true}, {70, 35, true}, {999, 1, false}} {
			if got := write(s.balance, s.token); got != s.ok {
				t.Errorf("write balance %d with token %d: accepted=%v; want %v", s.balance, s.token, got, s.ok)
			}
		}
		var balance, f int64
		if err := db.QueryRowContext(ctx, rebind(d, `SELECT balance, fence FROM accounts WHERE id = ?`), 1).Scan(&balance, &f); err != nil {
			t.Fatal(err)
		}
		if balance != 70 || f != 35 {
			t.Errorf("account: balance %d fence %d; want 70 and 35", balance, f)
		}
	})
}

// Many concurrent writers with interleaved tokens: the table ends with the
// value of the highest token, and the order in which writes were admitted
// (the guard row serializes them) never goes down, so every lower-token
// write after the highest was refused.
func concurrentWriters(t *testing.T, ctx context.Context, d fencesql.Dialect, db *sql.DB, strict bool) {
	var opts []fencesql.Option
	if strict {
		opts = append(opts, fencesql.Strict())
	}
	g, err := fencesql.New(d, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Setup(ctx, db); err != nil {
		t.Fatal(err)
	}
	resource := fmt.Sprintf("doc-%v", strict)
	id := 1
	if strict {
		id = 2
	}
	if _, err := db.ExecContext(ctx, rebind(d, `INSERT INTO doc (id, body, token) VALUES (?, 'empty', 0)`), id); err != nil {
		t.Fatal(err)
	}
	const writers, each = 6, 10
	var (
		mu       sync.Mutex
		accepted int
		wg       sync.WaitGroup
	)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				tok := int64(1 + w + writers*(i^1))
				err := func() error {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					defer tx.Rollback()
					if err := g.Admit(ctx, tx, resource, tok); err != nil {
						return err
					}
					if _, err := tx.ExecContext(ctx, rebind(d, `UPDATE doc SET body = ?, token = ? WHERE id = ?`),
						fmt.Sprintf("written with %d", tok), tok, id); err != nil {
						return err
					}
					// The guard row is locked: count this resource's admitted writes.
					var seq int64
					if err := tx.QueryRowContext(ctx, rebind(d, `SELECT count(*) FROM wlog WHERE resource = ?`), resource).Scan(&seq); err != nil {
						return err
					}
					if _, err := tx.ExecContext(ctx, rebind(d, `INSERT INTO wlog (resource, seq, token) VALUES (?, ?, ?)`), resource, seq, tok); err != nil {
						return err
					}
					return tx.Commit()
				}()
				switch {
				case err == nil:
					mu.Lock()
					accepted++
					mu.Unlock()
				case errors.Is(err, fence.ErrStale):
				default:
					t.Errorf("write with token %d: %v", tok, err)
				}
			}
		})
	}
	wg.Wait()
	const highest = writers * each
	var body string
	var final int64
	if err := db.QueryRowContext(ctx, rebind(d, `SELECT body, token FROM doc WHERE id = ?`), id).Scan(&body, &final); err != nil {
		t.Fatal(err)
	}
	if final != highest || body != fmt.Sprintf("written with %d", highest) {
		t.Errorf("final row %q token %d; want the write of the highest token %d", body, final, highest)
	}
	rows, err := db.QueryContext(ctx, rebind(d, `SELECT token FROM wlog WHERE resource = ? ORDER BY seq`), resource)
	if err != nil {
		t.Fatal(err)
	}
	var logged []int64
	for rows.Next() {
		var tok int64
		_ = rows.Scan(&tok)
		logged = append(logged, tok)
	}
	rows.Close()
	if len(logged) != accepted {
		t.Errorf("%d writes logged; %d accepted", len(logged), accepted)
	}
	for i := 1; i < len(logged); i++ {
		if logged[i] < logged[i-1] || strict && logged[i] == logged[i-1] {
			t.Fatalf("admitted tokens went down (strict=%v): %v", strict, logged)
		}
	}
	t.Logf("%d of %d writes accepted, the rest refused as stale", accepted, writers*each)
	if accepted == writers*each {
		t.Errorf("no stale write refused: the interleaving did not test the guard")
	}
}
