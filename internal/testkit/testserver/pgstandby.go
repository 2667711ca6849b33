package testserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Replication is how a PostgresPair's primary waits for its standby.
type Replication int

const (
	// Synchronous: a commit returns once the standby has flushed it
	// (synchronous_standby_names names the standby, synchronous_commit
	// on), so a promoted standby has every commit a client saw succeed.
	// A primary without its standby commits nothing until one is back.
	Synchronous Replication = iota
	// Asynchronous: a commit returns once it is on the primary; the
	// standby follows a little behind, and a promoted standby lacks the
	// commits it had not received.
	Asynchronous
)

func (r Replication) String() string {
	if r == Asynchronous {
		return "asynchronous"
	}
	return "synchronous"
}

// standbyName is the application_name the standby streams under, which
// synchronous_standby_names names: pg_basebackup's own streaming
// connection must never count as the synchronous standby.
const standbyName = "fence_standby"

// PostgresPairServer is a PostgreSQL primary with a streaming standby,
// each a private server of its own (Nodes), on its own port and data
// directory. Roles change: Promote makes the standby the primary, and
// Rejoin brings the other node back as a standby of it.
type PostgresPairServer struct {
	// Nodes are the two servers, whatever their roles; their addresses
	// never change.
	Nodes [2]*PostgresServer
	mode  Replication

	base   [2]string // each node's directory: socket, data
	bin    string    // pg_basebackup
	logDir string    // pg_basebackup's logs
	cred   *syscall.Credential
	mu     sync.Mutex
	active int // the node that is (or last was) the primary
}

// PostgresPair starts a primary as Postgres does (database test), copies
// it with pg_basebackup into a standby on a free port of its own, starts
// the standby streaming from it, and waits until the primary sees it
// stream (and, Synchronous, as its synchronous standby). OnNet, node i
// runs on host i (the net needs two) and lets clients in from anywhere;
// a Synchronous primary cut from its standby (Net.Isolate) commits
// nothing until the cut heals.
func PostgresPair(t testing.TB, mode Replication, opts ...Option) *PostgresPairServer {
	t.Helper()
	pgBin := Require(t, "postgres")
	if real, err := filepath.EvalSymlinks(pgBin); err == nil {
		pgBin = real
	}
	// pg_basebackup from the postgres's own directory: their versions
	// must match (Debian's /usr/bin one is a wrapper that picks one).
	bb := filepath.Join(filepath.Dir(pgBin), "pg_basebackup")
	if !isExecutable(bb) {
		Unavailable(t, "testserver: %s not found beside postgres; install Debian package postgresql", bb)
	}
	// A standby that lost its primary retries every wal_retrieve_retry_interval
	// (5 s by default), and a promotion waits for the retry to end.
	opts = append(opts, Args("-c", "wal_keep_size=64MB", "-c", "wal_retrieve_retry_interval=100ms"))
	o := collect(opts)
	o.check(t, "PostgresPair", credentials{clock: true, net: true})
	if o.net != nil && o.net.Len() < 2 {
		t.Fatalf("testserver: PostgresPair on a net of %d hosts", o.net.Len())
	}
	primary := startPostgres(t, o, 0)
	pr := &PostgresPairServer{mode: mode, bin: bb, logDir: t.TempDir()}
	pr.Nodes[0] = primary
	pr.base[0] = primary.dir
	if mode == Synchronous {
		// Set once the database is made (a commit would wait for the
		// standby from now on) and before the copy, which carries it in
		// postgresql.auto.conf to every node that may be promoted.
		ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
		defer cancel()
		for _, q := range []string{"ALTER SYSTEM SET synchronous_standby_names = '" + standbyName + "'", "SELECT pg_reload_conf()"} {
			if _, err := pgQuery(ctx, primary.Addr(), "postgres", q); err != nil {
				t.Fatalf("testserver: postgres on %s: %s: %v", primary.Addr(), q, err)
			}
		}
	}

	pr.base[1] = dataDir(t, "pg-standby")
	cred, err := unprivileged(pr.base[1])
	if err != nil {
		t.Fatalf("testserver: postgres standby: %v", err)
	}
	pr.cred = cred
	standby := &PostgresServer{db: primary.db}
	data := filepath.Join(pr.base[1], "data")
	startRetrying(t, "postgres standby", func() error {
		port, err := freePort(0)
		if err != nil {
			return err
		}
		standby.Process = newPostgresProcess(t, pgBin, pr.base[1], data, cred, o, port, 1)
		if err := pr.copyPrimary(1); err != nil {
			return err
		}
		return standby.start()
	})
	pr.Nodes[1] = standby
	if err := pr.waitStreaming(); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	return pr
}

// Mode returns how the primary waits for its standby.
func (pr *PostgresPairServer) Mode() Replication { return pr.mode }

// Primary returns the node that is the primary, or was until it was
// killed and nothing was promoted yet.
func (pr *PostgresPairServer) Primary() *PostgresServer {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.Nodes[pr.active]
}

// Standby returns the other node: the standby, or the old primary that
// Rejoin has yet to bring back after a Promote.
func (pr *PostgresPairServer) Standby() *PostgresServer {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.Nodes[1-pr.active]
}

// Addrs returns the two nodes' addresses, node 0 first.
func (pr *PostgresPairServer) Addrs() []string {
	return []string{pr.Nodes[0].Addr(), pr.Nodes[1].Addr()}
}

// InRecovery asks node s whether it is a standby (pg_is_in_recovery).
func (pr *PostgresPairServer) InRecovery(ctx context.Context, s *PostgresServer) (bool, error) {
	rows, err := pgQuery(ctx, s.Addr(), "postgres", "SELECT pg_is_in_recovery()")
	if err != nil {
		return false, err
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		return false, fmt.Errorf("pg_is_in_recovery on %s: unexpected answer %q", s.Addr(), rows)
	}
	return rows[0][0] == "t", nil
}

// Promote makes the standby the primary (pg_promote, which returns once
// it accepts writes) and returns it. Kill the primary first: two
// primaries would take writes apart. Any goroutine may call it.
func (pr *PostgresPairServer) Promote() (*PostgresServer, error) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	next := pr.Nodes[1-pr.active]
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	rows, err := pgQuery(ctx, next.Addr(), "postgres", "SELECT pg_promote(true, 60)")
	if err != nil {
		return nil, fmt.Errorf("testserver: promote the standby on %s: %w", next.Addr(), err)
	}
	if len(rows) != 1 || len(rows) > 0 && (len(rows[0]) != 1 || rows[0][0] != "t") {
		return nil, fmt.Errorf("testserver: promote the standby on %s: pg_promote answered %q", next.Addr(), rows)
	}
	pr.active = 1 - pr.active
	return next, nil
}

// Rejoin kills the node that is not the primary if it runs, replaces its
// data directory with a fresh copy of the primary's (pg_basebackup: its
// own data, an old primary's last commits included, are gone), starts
// it as a standby of the primary and waits until it streams. Any
// goroutine may call it.
func (pr *PostgresPairServer) Rejoin() error {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	i := 1 - pr.active
	n := pr.Nodes[i]
	n.Kill()
	if err := pr.copyPrimary(i); err != nil {
		return err
	}
	if err := n.Start(); err != nil {
		return err
	}
	return pr.waitStreamingLocked()
}

// copyPrimary replaces node i's data directory with a pg_basebackup of
// the primary, set up to stream from it as standbyName.
func (pr *PostgresPairServer) copyPrimary(i int) error {
	primary := pr.Nodes[pr.active]
	data := filepath.Join(pr.base[i], "data")
	if err := os.RemoveAll(data); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(primary.Addr())
	conn := fmt.Sprintf("host=%s port=%d user=postgres", host, primary.Port())
	logPath := filepath.Join(pr.logDir, fmt.Sprintf("pg_basebackup-%d.log", time.Now().UnixNano()))
	if err := runLogged(logPath, pr.base[i], pr.cred, pr.bin,
		"-d", conn, "-D", data, "-X", "stream", "-c", "fast", "--no-sync"); err != nil {
		return fmt.Errorf("testserver: copy the primary on %s: %w", primary.Addr(), err)
	}
	conf := fmt.Sprintf("primary_conninfo = '%s application_name=%s'\nrecovery_target_timeline = 'latest'\n", conn, standbyName)
	if err := appendFile(filepath.Join(data, "postgresql.auto.conf"), conf); err != nil {
		return err
	}
	// Written by us as root: the server's user must own it.
	sig := filepath.Join(data, "standby.signal")
	if err := os.WriteFile(sig, nil, 0o600); err != nil {
		return err
	}
	if pr.cred != nil {
		return os.Chown(sig, int(pr.cred.Uid), int(pr.cred.Gid))
	}
	return nil
}

// WaitStreaming waits until the primary sees the standby stream (and,
// Synchronous, as its synchronous standby), as after a cut between them
// healed. Any goroutine may call it.
func (pr *PostgresPairServer) WaitStreaming() error { return pr.waitStreaming() }

func (pr *PostgresPairServer) waitStreaming() error {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.waitStreamingLocked()
}

// waitStreamingLocked waits until the primary sees the standby stream
// (Synchronous: as its synchronous standby).
func (pr *PostgresPairServer) waitStreamingLocked() error {
	primary := pr.Nodes[pr.active]
	q := "SELECT state, sync_state FROM pg_stat_replication WHERE application_name = '" + standbyName + "'"
	want := "async"
	if pr.mode == Synchronous {
		want = "sync"
	}
	deadline := time.Now().Add(ReadyTimeout)
	var last string
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		rows, err := pgQuery(ctx, primary.Addr(), "postgres", q)
		cancel()
		switch {
		case err != nil:
			last = err.Error()
		case len(rows) == 1 && len(rows[0]) == 2 && rows[0][0] == "streaming" && rows[0][1] == want:
			return nil
		default:
			last = fmt.Sprintf("pg_stat_replication: %q", rows)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("testserver: the standby on %s does not stream from the primary on %s as %s after %v: %s",
		pr.Nodes[1-pr.active].Addr(), primary.Addr(), want, ReadyTimeout, last)
}
