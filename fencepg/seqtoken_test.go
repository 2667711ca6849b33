package fencepg_test

// Experiments behind docs/postgres.md, "Why the token is a row, not a
// sequence": could a PostgreSQL sequence replace session mode's counter
// row? They kill servers and time statements, so they run only when
// asked, from the fencepg directory:
//
//	FENCEPG_SEQTOKEN=1 go test -run 'TestSeqToken' -v .
//
// They report what they see (t.Log) and fail when the experiment itself
// cannot run, or when session mode's own token goes back across a crash.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencepg"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func seqExperiment(t *testing.T) {
	t.Helper()
	if os.Getenv("FENCEPG_SEQTOKEN") == "" {
		t.Skip("an experiment for docs/postgres.md: set FENCEPG_SEQTOKEN=1 to run it")
	}
}

func connect(t *testing.T, ctx context.Context, dsn string) *pgx.Conn {
	t.Helper()
	var conn *pgx.Conn
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if conn, err = pgx.Connect(ctx, dsn); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

func one[T any](t *testing.T, ctx context.Context, conn *pgx.Conn, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := conn.QueryRow(ctx, sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// TestSeqTokenCrash hands out sequence values in sessions that commit
// nothing durable, SIGKILLs the server (no checkpoint, no shutdown),
// restarts it on the same data directory and calls nextval again: is the
// value after the crash above every value handed out before it? (The
// server runs with fsync=off, which a killed process does not notice:
// WAL it wrote is in the kernel and survives; what is lost is WAL still
// in the server's own buffers, as in any crash.)
//
// The ways of calling nextval:
//   - select: autocommit SELECT nextval, one statement per value;
//   - advisory: session mode's shape, nextval in the statement that takes
//     the advisory lock (SELECT nextval(..) WHERE pg_try_advisory_lock),
//     then pg_advisory_unlock;
//   - rollback: the first value in a transaction that rolls back, the
//     others autocommit;
//   - concurrent: the first value in a transaction of another session that
//     is still open at the crash (as a commit still waiting for its WAL
//     flush or its synchronous standby would be), the others autocommit
//     in this session;
//   - concurrent+xid, concurrent+msg: the same, this session's values
//     taken with an xid (pg_current_xact_id()), or with an xid and a WAL
//     record of their own (a transactional pg_logical_emit_message), in
//     the statement;
//   - fence-session: today's session mode (fencepg.SessionStore, the
//     counter row), for comparison: its token, and its counter row.
func TestSeqTokenCrash(t *testing.T) {
	seqExperiment(t)
	ctx := ctxFor(t)
	srv := testserver.Postgres(t)
	if err := fencepg.Setup(ctx, openPool(t, srv.DSN())); err != nil {
		t.Fatal(err)
	}

	type result struct {
		how, syncCommit string
		calls           int
		last, after     int64
		note            string
	}
	var results []result
	i := 0
	for _, how := range []string{"select", "advisory", "rollback", "concurrent", "concurrent+xid", "concurrent+msg", "fence-session"} {
		for _, sc := range []string{"on", "off"} {
			for _, calls := range []int{1, 31, 33, 100} {
				if (how == "rollback" || strings.HasPrefix(how, "concurrent")) && calls == 1 {
					continue // needs a second value
				}
				i++
				r := result{how: how, syncCommit: sc, calls: calls}
				r.last, r.after, r.note = seqCrashCase(t, ctx, srv, i, how, sc, calls)
				results = append(results, r)
			}
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-14s %-18s %6s %20s %20s  %s\n", "how", "synchronous_commit", "calls", "highest before", "first after", "")
	for _, r := range results {
		verdict := "above"
		if r.after <= r.last {
			verdict = "WENT BACK"
		}
		fmt.Fprintf(&b, "%-14s %-18s %6d %20d %20d  %s %s\n", r.how, r.syncCommit, r.calls, r.last, r.after, verdict, r.note)
	}
	t.Logf("PostgreSQL %s, a SIGKILL right after the last value:\n%s",
		serverVersion(t, ctx, srv.DSN()), b.String())
	// The sequence rows are what the experiment measures; session mode's
	// own token is a guarantee (docs/design.md, section 3, rule 9).
	for _, r := range results {
		if r.how == "fence-session" && r.after <= r.last {
			t.Errorf("session mode's token went back across the crash (synchronous_commit %s, %d grants): %d, then %d",
				r.syncCommit, r.calls, r.last, r.after)
		}
	}
}

func serverVersion(t *testing.T, ctx context.Context, dsn string) string {
	conn := connect(t, ctx, dsn)
	defer func() { _ = conn.Close(ctx) }()
	return one[string](t, ctx, conn, `SHOW server_version`)
}

// seqCrashCase runs one case on a fresh sequence (or key) and returns the
// highest value handed out before the crash and the first one after.
func seqCrashCase(t *testing.T, ctx context.Context, srv *testserver.PostgresServer, i int, how, sc string, calls int) (last, after int64, note string) {
	t.Helper()
	dsn := srv.DSN() + "&synchronous_commit=" + sc // a run-time parameter of the session
	seq := fmt.Sprintf("tok_%d", i)
	key := "seq-crash/" + seq
	admin := connect(t, ctx, srv.DSN())
	if _, err := admin.Exec(ctx, `CREATE SEQUENCE `+seq); err != nil {
		t.Fatal(err)
	}
	// Start from a checkpoint, as a server that has run a while would.
	if _, err := admin.Exec(ctx, `CHECKPOINT`); err != nil {
		t.Fatal(err)
	}
	nextval := `SELECT nextval('` + seq + `')`
	var pool interface{ Close() }
	switch how {
	case "select":
		conn := connect(t, ctx, dsn)
		for range calls {
			last = one[int64](t, ctx, conn, nextval)
		}
	case "advisory":
		conn := connect(t, ctx, dsn)
		for range calls {
			last = one[int64](t, ctx, conn, nextval+` WHERE pg_try_advisory_lock(42)`)
			if !one[bool](t, ctx, conn, `SELECT pg_advisory_unlock(42)`) {
				t.Fatal("advisory lock not held")
			}
		}
	case "rollback":
		conn := connect(t, ctx, dsn)
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(ctx, nextval).Scan(&last); err != nil {
			t.Fatal(err)
		}
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		for range calls - 1 {
			last = one[int64](t, ctx, conn, nextval)
		}
	case "concurrent", "concurrent+xid", "concurrent+msg":
		other := connect(t, ctx, dsn)
		tx, err := other.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := tx.QueryRow(ctx, nextval).Scan(&last); err != nil {
			t.Fatal(err)
		}
		call := map[string]string{
			"concurrent":     nextval,
			"concurrent+xid": nextval + ` WHERE pg_current_xact_id() IS NOT NULL`,
			"concurrent+msg": nextval + ` WHERE pg_logical_emit_message(true, 'fence', '') IS NOT NULL`,
		}[how]
		conn := connect(t, ctx, dsn)
		for range calls - 1 {
			last = one[int64](t, ctx, conn, call)
		}
	case "fence-session":
		p := openPool(t, dsn)
		pool = p
		d, err := fencepg.NewSessionStore(p)
		if err != nil {
			t.Fatal(err)
		}
		for range calls {
			c, err := d.TryAcquire(ctx, fence.Request{Key: key, Owner: "o", TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			last = c.Token()
			if err := c.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		defer d.Close()
	}
	srv.Restart() // SIGKILL, then start on the same data directory: crash recovery

	conn := connect(t, ctx, srv.DSN())
	if how != "fence-session" {
		return last, one[int64](t, ctx, conn, nextval), ""
	}
	counter := one[int64](t, ctx, conn, `SELECT coalesce((SELECT token FROM fence_tokens WHERE key = $1), 0)`, key)
	switch {
	case counter == 0:
		note = "(the counter row was lost: the token came from the clock)"
	case counter < last:
		note = fmt.Sprintf("(the counter row went back by %d: the token came from the clock)", last-counter)
	}
	pool.Close()
	p := openPool(t, srv.DSN())
	d, err := fencepg.NewSessionStore(p)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	c, err := d.TryAcquire(ctx, fence.Request{Key: key, Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Release(ctx) }()
	return last, c.Token(), note
}

// TestSeqTokenCost times one acquire + release of a key on an uncontended
// advisory lock, side by side on the same private server, interleaved in
// rounds (a shuffled order each round): today's session mode through the
// driver, the same statements raw, a lock without a token, and sequence
// tokens. It runs once on a server with fsync=off (testserver's default,
// as docs/performance.md) and once with fsync=on, where a commit that
// flushes WAL waits for the disk. It reports the median, the 99th
// percentile and the mean of single pairs, and the WAL bytes written per
// pair (pg_current_wal_insert_lsn before and after each turn).
func TestSeqTokenCost(t *testing.T) {
	seqExperiment(t)
	for _, fsync := range []string{"off", "on"} {
		t.Run("fsync="+fsync, func(t *testing.T) {
			seqCost(t, testserver.Postgres(t, testserver.Args("-c", "fsync="+fsync,
				"-c", "shared_preload_libraries=pg_stat_statements")))
		})
	}
}

func seqCost(t *testing.T, srv *testserver.PostgresServer) {
	ctx := ctxFor(t)
	pool := openPool(t, srv.DSN())
	if err := fencepg.Setup(ctx, pool); err != nil {
		t.Fatal(err)
	}
	exec(t, pool, `CREATE SEQUENCE fence_token_seq`)
	d, err := fencepg.NewSessionStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	admin := connect(t, ctx, srv.DSN())
	if _, err := admin.Exec(ctx, `CREATE EXTENSION pg_stat_statements`); err != nil {
		t.Fatal(err)
	}
	const row = `INSERT INTO fence_tokens AS t (key, lock_id, token, owner, holder_pid, meta, acquired_at)
		SELECT $1, $2, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint, $3, pg_backend_pid(), NULL, clock_timestamp()
		WHERE pg_try_advisory_lock($2)
		ON CONFLICT (key) DO UPDATE
			SET token = greatest(t.token + 1, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint),
				owner = EXCLUDED.owner, holder_pid = EXCLUDED.holder_pid,
				meta = EXCLUDED.meta, acquired_at = EXCLUDED.acquired_at
		RETURNING t.token`

	type contender struct {
		name, what string
		pair       func() error
		lat        []time.Duration
		wal        int64
		server     float64 // ms
	}
	// raw is an acquire statement returning the token, then the unlock, on
	// a connection of its own, for key's advisory id.
	raw := func(key, acquire string, withKey bool) func() error {
		conn := connect(t, ctx, srv.DSN())
		id := fencepg.AdvisoryID(key)
		return func() error {
			var token int64
			var err error
			if withKey {
				err = conn.QueryRow(ctx, acquire, key, id, "o").Scan(&token)
			} else {
				err = conn.QueryRow(ctx, acquire, id).Scan(&token)
			}
			if err != nil {
				return fmt.Errorf("acquire: %w", err)
			}
			var ok bool
			if err := conn.QueryRow(ctx, `SELECT pg_advisory_unlock($1)`, id).Scan(&ok); err != nil || !ok {
				return fmt.Errorf("unlock: %v %v", ok, err)
			}
			return nil
		}
	}
	cs := []*contender{
		{name: "fence-session", what: "fencepg.SessionStore TryAcquire + Release (counter row)",
			pair: func() error {
				c, err := d.TryAcquire(ctx, fence.Request{Key: "cost/fence", Owner: "o", TTL: time.Minute})
				if err != nil {
					return err
				}
				return c.Release(ctx)
			}},
		{name: "row", what: "session mode's statement raw: pg_try_advisory_lock + counter row bump",
			pair: raw("cost/row", row, true)},
		{name: "no-token", what: "SELECT pg_try_advisory_lock, no token",
			pair: raw("cost/none", `SELECT CASE WHEN pg_try_advisory_lock($1) THEN 1::bigint END`, false)},
		{name: "seq", what: "SELECT nextval(seq) WHERE pg_try_advisory_lock",
			pair: raw("cost/seq", `SELECT nextval('fence_token_seq') WHERE pg_try_advisory_lock($1)`, false)},
		{name: "seq+xid", what: "the same and pg_current_xact_id(): an xid, a commit record, but no flush (nothing else logged)",
			pair: raw("cost/seqxid", `SELECT nextval('fence_token_seq') WHERE pg_try_advisory_lock($1) AND pg_current_xact_id() IS NOT NULL`, false)},
		{name: "seq+msg", what: "the same and pg_logical_emit_message(true, ..): WAL and an xid, so a flushed commit each time",
			pair: raw("cost/seqmsg", `SELECT nextval('fence_token_seq') WHERE pg_try_advisory_lock($1) AND pg_logical_emit_message(true, 'fence', '') IS NOT NULL`, false)},
	}
	const rounds, perTurn = 20, 60
	for _, c := range cs {
		for range 20 { // warm up: connections, plans
			if err := c.pair(); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
	}
	lsn := func() int64 {
		return one[int64](t, ctx, admin, `SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn`)
	}
	// The server's time executing statements (not parsing, planning or
	// committing them), the admin connection's own queries left out.
	serverMs := func() float64 {
		return one[float64](t, ctx, admin, `SELECT coalesce(sum(total_exec_time), 0) FROM pg_stat_statements
			WHERE query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '%pg_current_wal_insert_lsn%'`)
	}
	for range rounds {
		order := slices.Clone(cs)
		rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, c := range order {
			before, ms := lsn(), serverMs()
			for range perTurn {
				start := time.Now()
				if err := c.pair(); err != nil {
					t.Fatalf("%s: %v", c.name, err)
				}
				c.lat = append(c.lat, time.Since(start))
			}
			c.wal += lsn() - before
			c.server += serverMs() - ms
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-14s %9s %9s %9s %11s %10s  %s\n", "contender", "p50 µs", "p99 µs", "mean µs", "WAL B/pair", "server µs", "")
	for _, c := range cs {
		slices.Sort(c.lat)
		var sum time.Duration
		for _, l := range c.lat {
			sum += l
		}
		n := len(c.lat)
		us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
		fmt.Fprintf(&b, "%-14s %9.0f %9.0f %9.0f %11.0f %10.1f  %s\n", c.name, us(c.lat[n/2]), us(c.lat[n*99/100]),
			us(sum/time.Duration(n)), float64(c.wal)/float64(n), c.server*1000/float64(n), c.what)
	}
	t.Logf("PostgreSQL %s, %s, %d rounds of %d pairs each, 1 client, one key each:\n%s",
		one[string](t, ctx, admin, `SHOW server_version`), "fsync="+one[string](t, ctx, admin, `SHOW fsync`),
		rounds, perTurn, b.String())
}
