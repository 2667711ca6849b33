package torture

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencing/fence/internal/testkit/testserver"
)

// A PostgreSQL primary with a synchronous streaming standby, in lease
// mode, whose restart fault is a failover: the primary killed, the
// standby promoted, the killed node back as a standby of the new primary.
//
// Replication is synchronous (testserver.Synchronous): a commit returns
// once the standby has it, so a promoted standby has every lease,
// renewal and token a worker was told of, and the kill is no loss of the
// store's state (no crashOverlap allowance). The price is availability:
// from the promotion until the old primary streams again from the new
// one, the new primary commits nothing, and grants, renewals and
// releases wait. Asynchronous replication would lose the last commits;
// docs/postgres.md says what that does to leases and tokens.

func init() {
	kinds["postgres-failover"] = kind{
		about:  "a private PostgreSQL primary with a synchronous streaming standby, lease mode (the restart fault kills the primary, promotes the standby and brings the killed node back as its standby)",
		scheme: "postgres",
		open:   openPostgresFailover,
		// cluster: the no-guard proof runs on it (proofStores).
		cluster: true,
	}
}

// pgFailoverFor is how long a failover episode may take here: the
// promotion and the killed node copied from the new primary, started and
// streaming again (docs/reliability.md has the figures), four times over
// for a loaded machine.
const pgFailoverFor = 4 * time.Second

func openPostgresFailover(env *testserver.Env) (*Store, error) {
	nt, why, err := onNet(env, 2)
	if err != nil {
		return nil, err
	}
	var pr *testserver.PostgresPairServer
	if err := env.Do(func(tb testing.TB) { pr = testserver.PostgresPair(tb, testserver.Synchronous, netOpts(nt)...) }); err != nil {
		return nil, err
	}
	s, err := pgPairStore(pr)
	if err != nil {
		return nil, err
	}
	s.setPartition(nt, why, func() partitionFunc {
		return pgCut(nt, func() int { return slices.Index(pr.Nodes[:], pr.Primary()) }, pgCommits(pr), pr.WaitStreaming)
	}, 0)
	return s, nil
}

// pgCut is the partition fault of a synchronous pair on nt: the primary
// (primary names it) cut from its standby, while clients reach both. The
// primary then commits nothing: grants, renewals and releases wait until
// the heal, holders lose their leases by their own validity, and nothing
// is lost. Nothing promotes the standby meanwhile: a failover manager
// that did would first have to fence the old primary off, and a killed
// primary is the restart plan. The heal first checks that the cut bit (a
// commit on the primary waits: commits says so), then waits until the
// standby streams again (streaming).
func pgCut(nt cutter, primary func() int, commits func() (bool, error), streaming func() error) func(func(string)) (string, int, func() error, error) {
	return func(func(string)) (string, int, func() error, error) {
		p := primary()
		if err := nt.Isolate(p); err != nil {
			return "", 0, nil, err
		}
		heal := func() error {
			committed, cerr := commits()
			if err := nt.Heal(); err != nil {
				return err
			}
			switch {
			case cerr != nil:
				return fmt.Errorf("asking the cut-off primary to commit: %w", cerr)
			case committed:
				return errors.New("the partition did not bite: the primary committed with its synchronous standby cut off")
			}
			return streaming()
		}
		return fmt.Sprintf("cut the primary (node %d) from its synchronous standby (its clients still reach both)", p), p, heal, nil
	}
}

// pgCommits returns whether pr's primary commits a transaction that
// writes (a transactional logical message: no table) within a second; an
// error if it cannot ask. (A transaction that only takes an id writes no
// WAL before its commit record, and does not wait for the standby.)
func pgCommits(pr *testserver.PostgresPairServer) func() (bool, error) {
	return func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, pr.Primary().DSN())
		if err != nil {
			return false, err
		}
		defer conn.Close(context.Background())
		wait, cancelWait := context.WithTimeout(ctx, time.Second)
		defer cancelWait()
		_, err = conn.Exec(wait, "SELECT pg_logical_emit_message(true, 'fence-torture', 'partition probe')")
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return false, nil // it waits for the standby
		}
		return err == nil, err
	}
}

// pgPairStore is the postgres-failover store on pr.
func pgPairStore(pr *testserver.PostgresPairServer) (*Store, error) {
	db := pr.Primary().Database()
	// Both nodes, in a fixed order: pgx tries them in turn and keeps the
	// one that takes writes, wherever the primary is now.
	dsn := func(addrs []string) string {
		return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write", strings.Join(addrs, ","), db)
	}
	s := &Store{
		addrs:      pr.Addrs(),
		url:        func(a []string, _ time.Duration) string { return dsn(a) },
		restart:    func(_ time.Duration, started func(string)) (string, error) { return pgFailover(pr, started, nil) },
		restartFor: pgFailoverFor,
		// Measured: the next grant 0.6 s to 1.0 s after the primary's kill.
		grantWithin: 5 * time.Second,
		wipe:        wipePostgres(dsn(pr.Addrs())), // on the primary; the standby copies it
		// The standby lost its data and is copied afresh from the
		// primary, as an operator would reseed it; the primary stalls
		// meanwhile, and loses nothing. (Every failover brings the old
		// primary back so too; a primary that came back empty as the
		// primary would be the postgres store's restart-empty plan.)
		emptyMember: func(started func(string)) (string, error) {
			standby := pr.Standby()
			standby.Kill()
			killed := time.Now()
			started(fmt.Sprintf("kill the standby %s (SIGKILL) and bring it back empty, a fresh copy of the primary", standby.Addr()))
			if err := pr.Rejoin(); err != nil {
				return "", err
			}
			return fmt.Sprintf("%s back as the %s standby after %v", standby.Addr(), pr.Mode(), time.Since(killed).Round(10*time.Millisecond)), nil
		},
		clockNA:     "the pair runs on the machine's clock: the postgres store's clock-jump plan moves a PostgreSQL's clock, and a failover between two clocks is docs/postgres.md's clock assumption",
		partitionNA: "the pair runs on loopback here: only the postgres-failover store starts it on test hosts",
	}
	return s, s.setUp()
}

// pgFailover kills the primary, promotes the standby, and brings the
// killed node back as the new primary's standby. The kill is reported to
// started; promoted, if set, runs on the new primary before Rejoin.
func pgFailover(pr *testserver.PostgresPairServer, started func(string), promoted func(*testserver.PostgresServer) error) (string, error) {
	old, next := pr.Primary(), pr.Standby()
	old.Kill()
	killed := time.Now()
	started(fmt.Sprintf("kill the primary %s (SIGKILL) and promote the standby %s", old.Addr(), next.Addr()))
	if _, err := pr.Promote(); err != nil {
		return "", err
	}
	after := time.Since(killed)
	if promoted != nil {
		if err := promoted(next); err != nil {
			return "", err
		}
	}
	if err := pr.Rejoin(); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s promoted %v after the kill; %s back as its %s standby %v after it",
		next.Addr(), after.Round(10*time.Millisecond), old.Addr(), pr.Mode(), time.Since(killed).Round(10*time.Millisecond)), nil
}
