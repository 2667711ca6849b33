package fencepg_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testkit/leakcheck"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencepg"
	"github.com/fencing/fence/fencetest"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m, testserver.IgnoreLeaks()) }

// server starts a private PostgreSQL with fencepg's tables.
func server(t *testing.T) (*testserver.PostgresServer, *pgxpool.Pool) {
	t.Helper()
	srv := testserver.Postgres(t)
	pool := openPool(t, srv.DSN())
	if err := fencepg.Setup(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	// Setup is idempotent.
	if err := fencepg.Setup(context.Background(), pool); err != nil {
		t.Fatalf("second Setup: %v", err)
	}
	return srv, pool
}

func openPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	return poolFrom(t, cfg)
}

// poolFrom opens a pool from cfg, closed when t ends.
func poolFrom(t testing.TB, cfg *pgxpool.Config) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func exec(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func TestConformanceLease(t *testing.T) {
	t.Parallel() // on a server of its own
	var pool *pgxpool.Pool
	fencetest.Run(t, fencetest.Config{
		TTL: 2 * time.Second,
		Setup: func(t *testing.T) fencetest.Store {
			var srv *testserver.PostgresServer
			srv, pool = server(t)
			return fencetest.Store{
				Connect: srv.DSN(),
				// Deleting a lease behind its holder's back clears the row's
				// owner, keeping its token, as a takeover would.
				Delete: func(ctx context.Context, key string) error {
					_, err := pool.Exec(ctx, `UPDATE fence_locks SET owner = NULL WHERE key = $1`, key)
					return err
				},
				Wipe:   func(ctx context.Context, key string) error { return wipe(ctx, pool, key) },
				Outage: func(t *testing.T) func() { return outage(t, srv) },
				Leftovers: func(ctx context.Context, prefix string) ([]string, error) {
					// Rows of leases that expired (a killed holder's) stay
					// until taken over: only live ones are left behind.
					return leftovers(ctx, pool, `SELECT key FROM fence_locks WHERE starts_with(key, $1) AND owner IS NOT NULL
						AND expires_at > now()
						UNION ALL SELECT kind || ' ' || key FROM fence_kinds
						WHERE starts_with(key, $1) AND slot >= 0 AND owner IS NOT NULL AND expires_at > now()`, prefix)
				},
			}
		},
		Open: func(dsn string) (fence.Driver, func() error, error) {
			p, err := pgxpool.New(context.Background(), dsn)
			if err != nil {
				return nil, nil, err
			}
			d, err := fencepg.NewLeaseStore(p)
			if err != nil {
				p.Close()
				return nil, nil, err
			}
			return d, func() error { err := d.Close(); p.Close(); return err }, nil
		},
	})
}

func TestConformanceSession(t *testing.T) {
	t.Parallel() // on a server of its own
	var pool *pgxpool.Pool
	fencetest.Run(t, fencetest.Config{
		TTL:          2 * time.Second,
		SessionBound: true,
		Setup: func(t *testing.T) fencetest.Store {
			var srv *testserver.PostgresServer
			srv, pool = server(t)
			return fencetest.Store{
				Connect: srv.DSN(),
				// Deleting a session lease kills the holder's connection.
				Delete: func(ctx context.Context, key string) error {
					return terminateHolder(ctx, pool, fencepg.AdvisoryID(key), key)
				},
				KillSession: func(ctx context.Context, key string, kind fence.Kind) error {
					id := fencepg.AdvisoryID(key)
					if kind != fence.KindLock {
						id = fencepg.RWAdvisoryID(key)
					}
					return terminateHolder(ctx, pool, id, key)
				},
				Wipe:   func(ctx context.Context, key string) error { return wipe(ctx, pool, key) },
				Outage: func(t *testing.T) func() { return outage(t, srv) },
				Leftovers: func(ctx context.Context, prefix string) ([]string, error) {
					return leftovers(ctx, pool, `SELECT key FROM fence_tokens t JOIN pg_locks l
						ON l.locktype = 'advisory' AND l.classid::bigint = ((t.lock_id >> 32) & 4294967295)
						AND l.objid::bigint = (t.lock_id & 4294967295) AND l.objsubid = 1
						WHERE starts_with(t.key, $1)
						UNION ALL SELECT k.kind || ' ' || k.key FROM fence_kinds k JOIN pg_locks l
						ON l.locktype = 'advisory' AND l.classid::bigint = ((k.lock_id >> 32) & 4294967295)
						AND l.objid::bigint = (k.lock_id & 4294967295) AND l.objsubid = 1
						WHERE starts_with(k.key, $1)`, prefix)
				},
			}
		},
		Open: func(dsn string) (fence.Driver, func() error, error) {
			p, err := pgxpool.New(context.Background(), dsn)
			if err != nil {
				return nil, nil, err
			}
			d, err := fencepg.NewSessionStore(p)
			if err != nil {
				p.Close()
				return nil, nil, err
			}
			return d, func() error { err := d.Close(); p.Close(); return err }, nil
		},
	})
}

// outage kills the server, keeping its data, and returns what starts it
// again: committed rows (lease mode's leases, every mode's counters)
// survive; advisory locks do not.
func outage(t *testing.T, srv *testserver.PostgresServer) (restore func()) {
	srv.Kill()
	return func() {
		if err := srv.Start(); err != nil {
			t.Fatalf("restarting PostgreSQL: %v", err)
		}
	}
}

// terminateHolder ends the backends that hold the advisory lock id (of
// key), as an operator's pg_terminate_backend or a crash of the connection
// would, and waits until they are gone.
func terminateHolder(ctx context.Context, pool *pgxpool.Pool, id int64, key string) error {
	var pids []int32
	err := pool.QueryRow(ctx, `SELECT coalesce(array_agg(pid), '{}') FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
		AND classid::bigint = (($1::bigint >> 32) & 4294967295) AND objid::bigint = ($1::bigint & 4294967295)`, id).Scan(&pids)
	if err == nil && len(pids) == 0 {
		err = fmt.Errorf("no backend holds %q", key)
	}
	if err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) AS pid`, pids); err != nil {
		return err
	}
	// pg_terminate_backend only signals the backend: wait until it is gone
	// (its lock may go to a waiter at once).
	for deadline := time.Now().Add(10 * time.Second); ; {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)`, pids).Scan(&n)
		if err != nil || n == 0 {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the backend holding %q did not end", key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// wipe deletes every row of key, counters included, as a failover to a
// replica that never saw them or a truncated table would.
func wipe(ctx context.Context, pool *pgxpool.Pool, key string) error {
	for _, table := range []string{"fence_locks", "fence_tokens", "fence_kinds"} {
		if _, err := pool.Exec(ctx, `DELETE FROM `+table+` WHERE key = $1`, key); err != nil {
			return err
		}
	}
	return nil
}

func leftovers(ctx context.Context, pool *pgxpool.Pool, q, prefix string) ([]string, error) {
	rows, err := pool.Query(ctx, q, prefix)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func TestTableNamesValidated(t *testing.T) {
	bad := []string{"fence locks", "x;drop table y", `a"b`, "1abc", "a.b.c", "", "ä"}
	for _, name := range bad[:len(bad)-1] {
		if name == "" {
			continue
		}
		if _, err := fencepg.NewTxLocker(fencepg.WithTables(fencepg.Tables{Tokens: name})); !errors.Is(err, fence.ErrInvalidOption) {
			t.Errorf("table name %q: %v; want ErrInvalidOption", name, err)
		}
		if _, err := fencepg.NewGuard(fencepg.WithTables(fencepg.Tables{Guard: name})); !errors.Is(err, fence.ErrInvalidOption) {
			t.Errorf("guard table name %q: %v; want ErrInvalidOption", name, err)
		}
	}
	for _, name := range []string{"locks", "Locks", "app.fence_locks", "_x9"} {
		if _, err := fencepg.NewTxLocker(fencepg.WithTables(fencepg.Tables{Tokens: name})); err != nil {
			t.Errorf("table name %q: %v", name, err)
		}
	}
}

func TestAdvisoryIDStable(t *testing.T) {
	// The mapping is documented and must never change: other code may lock
	// the same ids.
	for key, want := range map[string]int64{
		"invoice-job": fencepg.AdvisoryID("invoice-job"),
	} {
		if got := fencepg.AdvisoryID(key); got != want {
			t.Errorf("AdvisoryID(%q) = %d; want %d", key, got, want)
		}
	}
	if got, want := fencepg.AdvisoryID(""), int64(-2039914840885289964); got != want {
		t.Errorf("AdvisoryID(\"\") = %d; want %d (first 8 bytes of SHA-256, big-endian)", got, want)
	}
}

// A waiter's statement bumps the token after waiting, with a snapshot
// taken before the wait. Under a default isolation stricter than READ
// COMMITTED the bump then fails with a serialization error; the driver
// bumps again in a statement of its own and the tokens still grow.
func TestSessionWaitUnderRepeatableRead(t *testing.T) {
	srv, _ := server(t)
	cfg, err := pgxpool.ParseConfig(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["default_transaction_isolation"] = "repeatable read"
	ctx := context.Background()
	clients := make([]*fence.Client, 3)
	for i := range clients {
		clients[i] = sessionClient(t, poolFrom(t, cfg), fence.WithTTL(10*time.Second))
	}
	a, err := clients[0].Acquire(ctx, "rr")
	if err != nil {
		t.Fatal(err)
	}
	// b and c both wait, each in a statement whose snapshot sees a's
	// token only; c's wait ends after b bumped the counter.
	got := make(chan *fence.Lease, 2)
	errs := make(chan error, 2)
	for _, c := range clients[1:] {
		go func() {
			l, err := c.Acquire(ctx, "rr")
			if err != nil {
				errs <- err
				return
			}
			got <- l
		}()
	}
	time.Sleep(300 * time.Millisecond) // both are waiting in the server
	tokens := []int64{a.Token()}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case l := <-got:
			tokens = append(tokens, l.Token())
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		case err := <-errs:
			t.Fatalf("Acquire under repeatable read: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("waiters did not get the key")
		}
	}
	if !(tokens[0] < tokens[1] && tokens[1] < tokens[2]) {
		t.Fatalf("tokens %v, want strictly increasing", tokens)
	}
}

// statements records the SQL of every query on the connections of a pool
// (fencepg's dedicated connections copy the pool's config, tracer included).
type statements struct {
	mu  sync.Mutex
	sql []string
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	s.sql = append(s.sql, data.SQL)
	s.mu.Unlock()
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// tracedSessionClient returns a session-mode Client on a server of its
// own, and the statements its connections send.
func tracedSessionClient(t *testing.T) (*fence.Client, *statements) {
	t.Helper()
	srv, _ := server(t)
	cfg, err := pgxpool.ParseConfig(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	seen := new(statements)
	cfg.ConnConfig.Tracer = seen
	return sessionClient(t, poolFrom(t, cfg), fence.WithTTL(10*time.Second)), seen
}

// take returns the statements since the last take.
func (s *statements) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	sql := s.sql
	s.sql = nil
	return sql
}

// A session-mode try that precedes a wait (Request.SkipHolder) does not
// read the holder: that read joins pg_locks, which holds all of the
// server's lock-table partitions at once, and with many waiters queued it
// slowed every handoff several times over. A plain try still names the
// holder.
func TestSessionTrySkipsHolderRead(t *testing.T) {
	c, seen := tracedSessionClient(t)
	ctx := context.Background()
	d := c.Driver()
	l, err := c.Acquire(ctx, "skip")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)

	readsHolder := func(sql []string) bool {
		return slices.ContainsFunc(sql, func(q string) bool { return strings.Contains(q, "pg_locks") })
	}
	req := fence.Request{Key: "skip", Owner: "other", TTL: 10 * time.Second, SkipHolder: true}
	seen.take()
	_, err = d.TryAcquire(ctx, req)
	var held *fence.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("TryAcquire with SkipHolder on a held key: %v; want a *HeldError", err)
	}
	if sql := seen.take(); readsHolder(sql) {
		t.Errorf("TryAcquire with SkipHolder read the holder: %q", sql)
	}

	req.SkipHolder = false
	_, err = d.TryAcquire(ctx, req)
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Token != l.Token() {
		t.Fatalf("TryAcquire on a held key: %v; want a *HeldError naming the holder (token %d)", err, l.Token())
	}
	if sql := seen.take(); !readsHolder(sql) {
		t.Errorf("TryAcquire named the holder without reading pg_locks? statements %q", sql)
	}
}

// A session-mode driver keeps idle connections for as many leases as its
// load had at once, so that a steady load opens no connection (with a
// fixed four kept, eight leases at a time closed and opened four
// connections a round), and closes those a burst opened once the burst
// is two idle windows old.
func TestSessionKeepsConnectionsForItsLoad(t *testing.T) {
	c, seen := tracedSessionClient(t)
	ctx := ctxFor(t)
	d := c.Driver().(*fencepg.SessionStore)
	var err error
	// Every new dedicated connection is set up with one statement.
	dials := func() int {
		n := 0
		for _, q := range seen.take() {
			if strings.Contains(q, "client_connection_check_interval") {
				n++
			}
		}
		return n
	}
	hold := func(n int) {
		t.Helper()
		ls := make([]*fence.Lease, n)
		for i := range ls {
			if ls[i], err = c.TryAcquire(ctx, fmt.Sprintf("load/%d", i)); err != nil {
				t.Fatal(err)
			}
		}
		for _, l := range ls {
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	const load = 8
	hold(load)
	if n := dials(); n != load {
		t.Fatalf("%d leases at once opened %d connections; want %d", load, n, load)
	}
	hold(load)
	if n := dials(); n != 0 {
		t.Errorf("%d leases at once again opened %d connections; want 0 (the first round's were kept)", load, n)
	}
	fencepg.SetIdleWindow(d, 10*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	hold(1) // its release closes what the burst left beyond the minimum
	hold(load)
	if n := dials(); n != load-4 {
		t.Errorf("%d leases at once after two idle windows with one lease opened %d connections; want %d (4 kept)", load, n, load-4)
	}
}

// An option given to a constructor that does not use it is refused,
// naming the option and the constructor, before anything is touched.
func TestOptionsRefusedWhereUnused(t *testing.T) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://fence@127.0.0.1:1/none") // never connected
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for call, try := range map[string]func() error{
		"Strict given to NewLeaseStore": func() error { _, err := fencepg.NewLeaseStore(pool, fencepg.Strict()); return err },
		"WithGuardMetrics given to NewSessionStore": func() error {
			_, err := fencepg.NewSessionStore(pool, fencepg.WithGuardMetrics(nil))
			return err
		},
		"WithAutoSetup given to NewGuard": func() error { _, err := fencepg.NewGuard(fencepg.WithAutoSetup()); return err },
		"Strict given to NewTxLocker":     func() error { _, err := fencepg.NewTxLocker(fencepg.Strict()); return err },
		"WithAutoSetup given to Setup":    func() error { return fencepg.Setup(ctx, pool, fencepg.WithAutoSetup()) },
	} {
		if err := try(); !errors.Is(err, fence.ErrInvalidOption) || !strings.Contains(err.Error(), call) {
			t.Errorf("%s: %v; want ErrInvalidOption naming both", call, err)
		}
	}
	g, err := fencepg.NewGuard(fencepg.Strict(), fencepg.WithGuardMetrics(nil), fencepg.WithTables(fencepg.Tables{Guard: "g"}))
	if err != nil || g == nil {
		t.Errorf("NewGuard with its own options: %v", err)
	}
}
