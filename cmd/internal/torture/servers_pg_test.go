package torture

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestPostgresAsyncFailoverLoss is what the postgres-failover store would
// show with asynchronous replication, and the proof that its restart
// plan catches a failover that loses a lease: the restart plan on a pair
// replicating asynchronously, with the primary's WAL sender stopped until
// the primary has granted a lease the standby never receives, then the
// primary killed and the standby promoted. The promoted standby does not
// know the lease, and another worker is granted the key while the lost
// lease's holder believes in it (until its first renewal is refused): an
// overlap. Marked as a loss at the kill, it is one crashOverlap explains
// and the plan must be clean; reported as a plain restart, as the
// synchronous store reports its kills, the same overlap must fail the
// plan. In both, no token may go back (a grant reported after the lost
// one with a lower token is a violation, one asked for after it a token
// regression), although the promoted standby's counter went back: the new
// primary's tokens come from its clock, above the lost ones
// (docs/postgres.md, "Failover").
func TestPostgresAsyncFailoverLoss(t *testing.T) {
	t.Parallel()
	cfg := short(FaultRestart, false)
	// The lost lease's holder first renews it a third of the TTL after
	// its grant (2 s): after the kill (0.2 s after the grant), the
	// promotion and the next grant (a few hundred milliseconds more),
	// and later than the overlap slack (a tenth of the TTL) after it. Its
	// slow step outlasts that renewal, so it holds the key until the
	// renewal ends it.
	cfg.TTL = 6 * time.Second
	cfg.Workers = 4
	cfg.Writes = 1
	cfg.Work = 3 * time.Second
	lossMarking(t, cfg, func(t *testing.T, env *testserver.Env, marked bool) *Store {
		var pr *testserver.PostgresPairServer
		startIn(t, env, func(tb testing.TB) { pr = testserver.PostgresPair(tb, testserver.Asynchronous) })
		s, err := pgPairStore(pr)
		if err != nil {
			t.Fatal(err)
		}
		s.Name = "postgres-async-cut-standby"
		s.restart = nil
		s.failover = func(_ time.Duration, started, lost func(string)) (string, error) {
			report := started
			if marked {
				report = lost
			}
			desc, err := cutStandbyThenFailover(pr, report)
			t.Logf("failover: %s", desc)
			return desc, err
		}
		return s
	})
}

// cutStandbyThenFailover stops the primary's WAL sender, waits until the
// primary grants a lease (which the standby never receives), then fails
// over (pgFailover, the kill reported to report), and checks that the
// promoted standby's token counter is below the lost grant's token. On the new primary it
// ends the leases the standby had: those of holders that had let go on
// the old primary before its last grant, and would only keep every
// contender out for a TTL past the lost lease's first renewal.
func cutStandbyThenFailover(pr *testserver.PostgresPairServer, report func(string)) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	primary := pr.Primary()
	conn, err := pgx.Connect(ctx, primary.DSN())
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	var sender int
	if err := conn.QueryRow(ctx, `SELECT pid FROM pg_stat_replication`).Scan(&sender); err != nil {
		return "", fmt.Errorf("the primary's WAL sender: %w", err)
	}
	if err := syscall.Kill(sender, syscall.SIGSTOP); err != nil {
		return "", err
	}
	// A grant bumps the key's token.
	const top = `SELECT coalesce(max(token), 0) FROM fence_locks WHERE key LIKE 'torture/%'`
	var before, now, kept int64
	if err := conn.QueryRow(ctx, top).Scan(&before); err != nil {
		return "", err
	}
	for now = before; now == before; {
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("no lease granted for %v with the standby cut off", time.Minute)
		case <-time.After(20 * time.Millisecond):
		}
		if err := conn.QueryRow(ctx, top).Scan(&now); err != nil {
			return "", err
		}
	}
	// The kill waits until the grant's answer has reached its worker:
	// a lease whose holder never heard of it is no lease anyone believes.
	time.Sleep(200 * time.Millisecond)
	desc, err := pgFailover(pr, func(what string) {
		report(what + ", its WAL sender stopped since before its last grant")
	}, func(next *testserver.PostgresServer) error {
		c, err := pgx.Connect(ctx, next.DSN())
		if err != nil {
			return err
		}
		defer c.Close(context.Background())
		// The counter went back: a token of the old counter plus one
		// would not be above the lost grant's. Only the clock keeps
		// the next token above it.
		if err := c.QueryRow(ctx, top).Scan(&kept); err != nil {
			return err
		}
		if kept >= now {
			return fmt.Errorf("the promoted standby has token %d, not below the grant it should lack (%d): nothing was lost", kept, now)
		}
		_, err = c.Exec(ctx, `UPDATE fence_locks SET expires_at = clock_timestamp() WHERE key LIKE 'torture/%' AND owner IS NOT NULL`)
		return err
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s; the lost grant's token %d, the promoted standby's highest %d", desc, now, kept), nil
}
