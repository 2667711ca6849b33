package testserver

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestPostgresStandbySynchronous: a commit waits for the standby, so a
// promoted standby has it; a primary without a standby commits nothing
// until Rejoin brings the old primary back as its standby; and the pair
// fails over again the other way.
func TestPostgresStandbySynchronous(t *testing.T) {
	pr := PostgresPair(t, Synchronous)
	first := pr.Primary()
	mustQuery(t, first.Addr(), "CREATE TABLE t (x int); INSERT INTO t VALUES (1)")
	if in, err := pr.InRecovery(ctx(t), pr.Standby()); err != nil || !in {
		t.Fatalf("the standby is in recovery: %v, %v; want true", in, err)
	}

	// The standby paused, a commit does not return: it waits for it.
	pr.Standby().Stop()
	short, cancel := context.WithTimeout(context.Background(), time.Second)
	_, err := pgQuery(short, first.Addr(), "test", "INSERT INTO t VALUES (2)")
	cancel()
	if err == nil {
		t.Fatal("a commit returned while the synchronous standby was paused")
	}
	pr.Standby().Cont()

	first.Kill()
	second, err := pr.Promote()
	if err != nil {
		t.Fatal(err)
	}
	if second == first || pr.Primary() != second || pr.Standby() != first {
		t.Fatalf("after Promote: primary %s, standby %s; want %s, %s", pr.Primary().Addr(), pr.Standby().Addr(), second.Addr(), first.Addr())
	}
	if in, err := pr.InRecovery(ctx(t), second); err != nil || in {
		t.Fatalf("the promoted standby is in recovery: %v, %v; want false", in, err)
	}
	// Row 2 was committed on the primary and may have reached the
	// standby before the pause was over: only row 1 was acknowledged.
	if got := mustQuery(t, second.Addr(), "SELECT count(*) FROM t WHERE x = 1"); got != "1" {
		t.Fatalf("the promoted standby has %s acknowledged rows; want 1", got)
	}

	// Without a standby, the new primary commits nothing.
	short, cancel = context.WithTimeout(context.Background(), time.Second)
	_, err = pgQuery(short, second.Addr(), "test", "INSERT INTO t VALUES (3)")
	cancel()
	if err == nil {
		t.Fatal("the promoted primary committed without a synchronous standby")
	}

	if err := pr.Rejoin(); err != nil {
		t.Fatal(err)
	}
	mustQuery(t, second.Addr(), "INSERT INTO t VALUES (4)")
	second.Kill()
	third, err := pr.Promote()
	if err != nil {
		t.Fatal(err)
	}
	if third != first {
		t.Fatalf("the second failover promoted %s; want the first primary %s back", third.Addr(), first.Addr())
	}
	if got := mustQuery(t, third.Addr(), "SELECT count(*) FROM t WHERE x IN (1, 4)"); got != "2" {
		t.Fatalf("after two failovers %s of the acknowledged rows 1 and 4 are left; want 2", got)
	}
}

// TestPostgresStandbyAsynchronous: a commit returns without the standby,
// and a standby promoted before it received the commit lacks it.
func TestPostgresStandbyAsynchronous(t *testing.T) {
	pr := PostgresPair(t, Asynchronous)
	first := pr.Primary()
	mustQuery(t, first.Addr(), "CREATE TABLE t (x int)")
	// The standby has the table once it replayed the primary's position.
	waitReplayed(t, pr)
	// Its WAL sender stopped, the primary sends the standby nothing more
	// (a stopped standby would still find the WAL in its socket).
	sender, err := strconv.Atoi(mustQuery(t, first.Addr(), "SELECT pid FROM pg_stat_replication"))
	if err != nil {
		t.Fatalf("the primary's WAL sender: %v", err)
	}
	if err := syscall.Kill(sender, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	mustQuery(t, first.Addr(), "INSERT INTO t VALUES (1)") // acknowledged
	first.Kill()
	second, err := pr.Promote()
	if err != nil {
		t.Fatal(err)
	}
	if got := mustQuery(t, second.Addr(), "SELECT count(*) FROM t"); got != "0" {
		t.Fatalf("the promoted standby has %s rows; want 0: the acknowledged commit was lost", got)
	}
	if err := pr.Rejoin(); err != nil {
		t.Fatal(err)
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

// mustQuery runs sql on database test at addr and returns the first
// column of its first row ("" if none).
func mustQuery(t *testing.T, addr, sql string) string {
	t.Helper()
	rows, err := pgQuery(ctx(t), addr, "test", sql)
	if err != nil {
		t.Fatalf("%s on %s: %v", sql, addr, err)
	}
	if len(rows) == 0 || len(rows[0]) == 0 {
		return ""
	}
	return rows[0][0]
}

// waitReplayed waits until the standby has replayed everything the
// primary had written.
func waitReplayed(t *testing.T, pr *PostgresPairServer) {
	t.Helper()
	lsn := mustQuery(t, pr.Primary().Addr(), "SELECT pg_current_wal_lsn()")
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if mustQuery(t, pr.Standby().Addr(), "SELECT pg_last_wal_replay_lsn() >= '"+lsn+"'") == "t" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the standby did not replay up to %s", lsn)
}
