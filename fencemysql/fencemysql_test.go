package fencemysql_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testkit/leakcheck"
	_ "github.com/go-sql-driver/mysql"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemysql"
	"github.com/fencing/fence/fencetest"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m, testserver.IgnoreLeaks()) }

func openDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func server(t *testing.T) (*testserver.MariaDBServer, *sql.DB) {
	t.Helper()
	srv := testserver.MariaDB(t)
	db := openDB(t, srv.DSN())
	d, err := fencemysql.New(db)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // Setup is idempotent
		if err := d.Setup(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	return srv, db
}

func open(dsn string) (fence.Driver, func() error, error) {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return nil, nil, err
	}
	d, err := fencemysql.New(db)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return d, func() error { err := d.Close(); db.Close(); return err }, nil
}

// killHolder kills the connection that holds key's lock, as an operator's
// KILL or a crash would, and waits until the server has freed the lock.
func killHolder(ctx context.Context, db *sql.DB, key string) error {
	name := fencemysql.LockName("", key)
	var id sql.NullInt64
	if err := db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, name).Scan(&id); err != nil {
		return err
	}
	if !id.Valid {
		return fmt.Errorf("no connection holds %q", key)
	}
	if _, err := db.ExecContext(ctx, fmt.Sprintf("KILL %d", id.Int64)); err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		var now sql.NullInt64
		if err := db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, name).Scan(&now); err != nil {
			return err
		}
		if now.Int64 != id.Int64 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("connection %d holding %q did not end", id.Int64, key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestConformance(t *testing.T) {
	fencetest.Run(t, fencetest.Config{
		TTL:          2 * time.Second,
		SessionBound: true,
		Setup: func(t *testing.T) fencetest.Store {
			srv, db := server(t)
			return fencetest.Store{
				Connect: srv.DSN(),
				Delete: func(ctx context.Context, key string) error {
					return killHolder(ctx, db, key)
				},
				// Locks only: the driver supports no other kind.
				KillSession: func(ctx context.Context, key string, _ fence.Kind) error {
					return killHolder(ctx, db, key)
				},
				// The key's counter row goes, as on a replica that never
				// saw it, or in a restored backup.
				Wipe: func(ctx context.Context, key string) error {
					_, err := db.ExecContext(ctx, `DELETE FROM fence_tokens WHERE name = ?`, fencemysql.LockName("", key))
					return err
				},
				Leftovers: func(ctx context.Context, prefix string) ([]string, error) {
					rows, err := db.QueryContext(ctx, `SELECT lock_key FROM fence_tokens
						WHERE LEFT(lock_key, CHAR_LENGTH(?)) = ? AND IS_USED_LOCK(name) IS NOT NULL`, prefix, prefix)
					if err != nil {
						return nil, err
					}
					defer rows.Close()
					var keys []string
					for rows.Next() {
						var k string
						if err := rows.Scan(&k); err != nil {
							return nil, err
						}
						keys = append(keys, k)
					}
					return keys, rows.Err()
				},
				// The server dies (SIGKILL); its data directory stays, so
				// the counter table's committed bumps survive its restart.
				Outage: func(t *testing.T) func() {
					srv.Kill()
					return func() {
						if err := srv.Start(); err != nil {
							t.Fatalf("restarting mariadbd: %v", err)
						}
					}
				},
			}
		},
		Open: open,
	})
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func client(t *testing.T, dsn string, opts ...fence.ClientOption) *fence.Client {
	t.Helper()
	d, closeDrv, err := open(dsn)
	if err != nil {
		t.Fatal(err)
	}
	c := fence.New(d, opts...)
	t.Cleanup(func() {
		_ = c.Close(context.Background())
		_ = closeDrv()
	})
	return c
}

// A waiter whose context ends leaves no request behind: GET_LOCK keeps
// waiting in the server after its client goes away (MariaDB checks the
// connection only every few seconds), so the driver kills the statement.
// Without that, the waiter's thread would be granted the lock on release
// and hold it until it noticed its client was gone.
func TestCancelledWaitLeavesNoRequest(t *testing.T) {
	srv, db := server(t)
	ctx := ctxFor(t)
	a := client(t, srv.DSN(), fence.WithTTL(time.Minute))
	b := client(t, srv.DSN(), fence.WithTTL(time.Minute))
	c := client(t, srv.DSN(), fence.WithTTL(time.Minute))
	for i := range 5 {
		l, err := a.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		start := time.Now()
		if _, err := b.Acquire(wctx, "job"); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("cancelled wait: %v; want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("round %d: the cancelled wait took %v to end", i, d)
		}
		cancel()
		// The killed statement has answered; give the server a moment to
		// clear its thread's state (a dead client's wait would linger for
		// seconds).
		n := waits(t, ctx, db)
		for deadline := time.Now().Add(500 * time.Millisecond); n != 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
			n = waits(t, ctx, db)
		}
		if n != 0 {
			t.Errorf("round %d: %d waits in GET_LOCK still running after the wait was cancelled", i, n)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		l2, err := c.TryAcquire(ctx, "job")
		if err != nil {
			t.Fatalf("round %d: TryAcquire right after release: %v (a cancelled waiter took the lock)", i, err)
		}
		_ = l2.Release(ctx)
	}
}

func waits(t *testing.T, ctx context.Context, db *sql.DB) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM information_schema.processlist
		WHERE info LIKE '%fence wait%' AND id <> CONNECTION_ID()`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestLockName(t *testing.T) {
	for key, want := range map[string]string{
		"job":                   "fence:job",
		"a/b.c:d-e_f":           "fence:a/b.c:d-e_f",
		"Job":                   "fence#",
		"ключ":                  "fence#",
		strings.Repeat("a", 59): "fence#",
		strings.Repeat("a", 58): "fence:" + strings.Repeat("a", 58),
	} {
		got := fencemysql.LockName("", key)
		if !strings.HasPrefix(got, want) || len(got) > 64 {
			t.Errorf("LockName(%.20q) = %q; want %q... of at most 64 characters", key, got, want)
		}
	}
	if fencemysql.LockName("", "Job") == fencemysql.LockName("", "job") {
		t.Error("keys differing in case share a lock name")
	}
	if got := fencemysql.LockName("app", "x"); got != "app:x" {
		t.Errorf("LockName with a prefix = %q", got)
	}
}

func TestBadOptions(t *testing.T) {
	db := openDB(t, "root@tcp(127.0.0.1:1)/x")
	for _, opt := range []fencemysql.Option{
		fencemysql.WithTable("a;drop"), fencemysql.WithTable("a.b.c"), fencemysql.WithTable("1a"),
		fencemysql.WithPrefix("UPPER"), fencemysql.WithPrefix("toolongprefix"),
	} {
		if _, err := fencemysql.New(db, opt); !errors.Is(err, fence.ErrInvalidOption) {
			t.Errorf("New with a bad option: %v; want ErrInvalidOption", err)
		}
	}
}

// A lock name recorded for another key is refused as a collision.
func TestKeyCollisionDetected(t *testing.T) {
	srv, db := server(t)
	ctx := ctxFor(t)
	if _, err := db.ExecContext(ctx, `INSERT INTO fence_tokens (name, lock_key, token) VALUES (?, 'impostor', 7)`,
		fencemysql.LockName("", "job")); err != nil {
		t.Fatal(err)
	}
	c := client(t, srv.DSN())
	if _, err := c.TryAcquire(ctx, "job"); !errors.Is(err, fencemysql.ErrKeyCollision) {
		t.Errorf("TryAcquire of a colliding key: %v; want ErrKeyCollision", err)
	}
	var used sql.NullInt64
	_ = db.QueryRowContext(ctx, `SELECT IS_USED_LOCK(?)`, fencemysql.LockName("", "job")).Scan(&used)
	if used.Valid {
		t.Errorf("lock left held by connection %d after a refused collision", used.Int64)
	}
}

// A wait in GET_LOCK whose server dies goes on waiting: the lost
// connection matches fence.ErrUnavailable, so the Client tries again once
// the server is back, where the restart has freed the key.
func TestWaitThroughRestart(t *testing.T) {
	srv, _ := server(t)
	ctx := ctxFor(t)
	a := client(t, srv.DSN())
	b := client(t, srv.DSN())
	if _, err := a.TryAcquire(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		l, err := b.Acquire(ctx, "job", fence.WithWait(time.Minute))
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	time.Sleep(300 * time.Millisecond) // b waits in GET_LOCK
	srv.Kill()
	select {
	case err := <-got:
		t.Fatalf("Acquire ended when the server died: %v; want it to wait", err)
	case <-time.After(time.Second):
	}
	if err := srv.Start(); err != nil {
		t.Fatalf("restarting mariadbd: %v", err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("Acquire after the restart: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Acquire did not get the key after the restart")
	}
}
