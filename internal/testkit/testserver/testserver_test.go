package testserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// These tests start every kind of server for real and talk to it over its
// own protocol, so they fail when a server did not really start. Without a
// server's binary they skip, or fail under FENCE_TEST_STRICT=1.

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// short is a context for a request that must NOT be answered (a paused or
// killed server).
func short() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), 500*time.Millisecond)
}

func timed[T any](t *testing.T, what string, start func() T) T {
	t.Helper()
	begin := time.Now()
	v := start()
	t.Logf("%s ready in %v", what, time.Since(begin).Round(time.Millisecond))
	return v
}

// checkProcess checks what every started server must satisfy: a live pid
// that owns the listening socket on Addr.
func checkProcess(t *testing.T, p *Process) {
	t.Helper()
	if p.Pid() <= 0 {
		t.Fatalf("%s: Pid() = %d after start", p.name, p.Pid())
	}
	if mine, known := listenerOwnedBy(p.Pid(), p.Port()); known && !mine {
		t.Fatalf("%s: the socket listening on %s is not the server's", p.name, p.Addr())
	}
	if !strings.HasPrefix(p.Addr(), "127.0.0.1:") {
		t.Fatalf("%s: Addr() = %q, want loopback", p.name, p.Addr())
	}
	if fi, err := os.Stat(p.LogPath()); err != nil || fi.Size() == 0 {
		t.Errorf("%s: log %s: %v (size %v)", p.name, p.LogPath(), err, fi)
	}
}

// checkStopped checks that Stop froze every process of the server.
func checkStopped(t *testing.T, p *Process) {
	t.Helper()
	tree := processTree(p.Pid())
	if len(tree) == 0 {
		t.Fatalf("%s: no processes found for pid %d", p.name, p.Pid())
	}
	for _, pr := range tree {
		// A process stopped by a signal shows T; give the kernel a moment.
		for i := 0; ; i++ {
			now, ok := readProc(pr.pid)
			if !ok || now.state == 'T' || !now.running() {
				break
			}
			if i == 100 {
				t.Fatalf("%s: process %d is in state %c after Stop", p.name, pr.pid, now.state)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func TestVersionAtLeast(t *testing.T) {
	for _, c := range []struct {
		have, want string
		ok         bool
	}{
		{"2.15.2", "2.11", true},
		{"2.11.0", "2.11", true},
		{"2.9.10", "2.11", false},
		{"v2.10.99", "2.11.0", false},
		{"3.0.0-beta", "2.11", true},
	} {
		if got := versionAtLeast(c.have, c.want); got != c.ok {
			t.Errorf("versionAtLeast(%q, %q) = %v, want %v", c.have, c.want, got, c.ok)
		}
	}
}

func TestRepoRoot(t *testing.T) {
	root := RepoRoot()
	if root == "" {
		t.Fatal("RepoRoot() found no go.mod with module " + ModulePath)
	}
	wd, _ := os.Getwd()
	if rel, err := filepath.Rel(root, wd); err != nil || rel != filepath.Join("internal", "testkit", "testserver") {
		t.Errorf("RepoRoot() = %q, working directory %q", root, wd)
	}
	// A nested module (like a future bench/go.mod) is skipped over.
	nested := t.TempDir()
	if err := os.WriteFile(filepath.Join(nested, "go.mod"), []byte("module github.com/fencing/fence/bench\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if isRepoRoot(nested) {
		t.Error("isRepoRoot accepted module github.com/fencing/fence/bench")
	}
	if !isRepoRoot(root) {
		t.Errorf("isRepoRoot(%q) = false", root)
	}
}

// recordingTB records Skipf and Fatalf instead of ending the test.
type recordingTB struct {
	testing.TB
	skipped, fatal string
}

func (r *recordingTB) Helper()                           {}
func (r *recordingTB) Skipf(format string, args ...any)  { r.skipped = fmt.Sprintf(format, args...) }
func (r *recordingTB) Fatalf(format string, args ...any) { r.fatal = fmt.Sprintf(format, args...) }

func TestRequireMissingSkipsOrFailsUnderStrict(t *testing.T) {
	const name = "fence-no-such-server"
	installHint[name] = "the Debian package fence-no-such-server"
	defer delete(installHint, name)

	t.Setenv(StrictEnv, "")
	r := &recordingTB{TB: t}
	Require(r, name)
	if r.fatal != "" || !strings.Contains(r.skipped, "install the Debian package fence-no-such-server") {
		t.Errorf("not strict: skipped %q, fatal %q; want a skip saying what to install", r.skipped, r.fatal)
	}

	t.Setenv(StrictEnv, "1")
	r = &recordingTB{TB: t}
	Require(r, name)
	if r.skipped != "" || !strings.Contains(r.fatal, "install the Debian package fence-no-such-server") {
		t.Errorf("strict: skipped %q, fatal %q; want a failure saying what to install", r.skipped, r.fatal)
	}
}

// A server that exists but cannot start is a failure with the command and
// the log's tail, never a skip.
func TestStartFailureFailsWithLog(t *testing.T) {
	Require(t, "redis-server")
	r := &recordingTB{TB: t}
	Redis(r, Args("--no-such-option", "x"))
	if r.skipped != "" {
		t.Fatalf("a failing start skipped: %s", r.skipped)
	}
	for _, want := range []string{"did not start", "redis-server", "--no-such-option", "last lines of", "Bad directive"} {
		if !strings.Contains(r.fatal, want) {
			t.Errorf("failure message lacks %q:\n%s", want, r.fatal)
		}
	}
}

// A port taken between choosing and binding it (by another test binary, say)
// makes the start retry on another port; it is neither a failure nor a
// server that is not ours.
func TestPortCollisionRetries(t *testing.T) {
	first := Redis(t)
	portMu.Lock()
	forcePortForTest = first.Port()
	portMu.Unlock()
	second := Redis(t)
	if second.Port() == first.Port() {
		t.Fatalf("second server reported the taken port %d", first.Port())
	}
	checkProcess(t, second.Process)
	ctx := testContext(t)
	if _, err := redisDo(ctx, first.Addr(), "SET", "who", "first"); err != nil {
		t.Fatal(err)
	}
	if v, err := redisDo(ctx, second.Addr(), "GET", "who"); err != nil || v != nil {
		t.Fatalf("second server: GET who = %v, %v; want nil", v, err)
	}
}

func TestListenerOwnedBy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	mine, known := listenerOwnedBy(os.Getpid(), port)
	if !known {
		t.Skip("no /proc here")
	}
	if !mine {
		t.Errorf("listenerOwnedBy(self, %d) = false for our own listener", port)
	}
	r := Redis(t)
	if mine, _ := listenerOwnedBy(r.Pid(), port); mine {
		t.Errorf("listenerOwnedBy(redis, %d) = true for the test's listener", port)
	}
	if mine, _ := listenerOwnedBy(r.Pid(), r.Port()); !mine {
		t.Errorf("listenerOwnedBy(redis, its own port) = false")
	}
}

func TestRedis(t *testing.T) {
	t.Parallel()
	r := timed(t, "redis-server", func() *RedisServer { return Redis(t) })
	checkProcess(t, r.Process)
	ctx := testContext(t)
	if v, err := redisDo(ctx, r.Addr(), "SET", "k", "v1"); err != nil || v != "OK" {
		t.Fatalf("SET = %v, %v", v, err)
	}
	if v, err := redisDo(ctx, r.Addr(), "GET", "k"); err != nil || v != "v1" {
		t.Fatalf("GET = %v, %v", v, err)
	}

	r.Stop()
	checkStopped(t, r.Process)
	sctx, cancel := short()
	if v, err := redisDo(sctx, r.Addr(), "PING"); err == nil {
		t.Fatalf("PING answered %v while stopped", v)
	}
	cancel()
	r.Cont()
	if v, err := redisDo(ctx, r.Addr(), "GET", "k"); err != nil || v != "v1" {
		t.Fatalf("GET after Cont = %v, %v", v, err)
	}

	pid := r.Pid()
	r.Kill()
	if r.Pid() != 0 {
		t.Fatalf("Pid() = %d after Kill", r.Pid())
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("process %d still exists after Kill: %v", pid, err)
	}
	if v, err := redisDo(ctx, r.Addr(), "PING"); err == nil {
		t.Fatalf("PING answered %v after Kill", v)
	}
	addr := r.Addr()
	timed(t, "redis-server restart", func() any { r.Restart(); return nil })
	if r.Addr() != addr || r.Pid() == 0 || r.Pid() == pid {
		t.Fatalf("after Restart: addr %s (was %s), pid %d (was %d)", r.Addr(), addr, r.Pid(), pid)
	}
	if v, err := redisDo(ctx, r.Addr(), "GET", "k"); err != nil || v != nil {
		t.Fatalf("GET after Restart = %v, %v; want nil: Redis must come back empty", v, err)
	}
}

func TestRedises(t *testing.T) {
	t.Parallel()
	rs := timed(t, "3 redis-servers", func() []*RedisServer { return Redises(t, 3) })
	ctx := testContext(t)
	seen := map[string]bool{}
	for i, r := range rs {
		checkProcess(t, r.Process)
		if seen[r.Addr()] {
			t.Fatalf("two servers on %s", r.Addr())
		}
		seen[r.Addr()] = true
		if _, err := redisDo(ctx, r.Addr(), "SET", "who", fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	for i, r := range rs {
		if v, err := redisDo(ctx, r.Addr(), "GET", "who"); err != nil || v != fmt.Sprint(i) {
			t.Fatalf("server %d: GET who = %v, %v: servers are not independent", i, v, err)
		}
	}
}

func TestRedisCluster(t *testing.T) {
	t.Parallel()
	c := timed(t, "redis cluster of 3", func() *RedisClusterServer { return RedisCluster(t, 3) })
	ctx := testContext(t)
	if len(c.Addrs()) != 3 {
		t.Fatalf("Addrs() = %v", c.Addrs())
	}
	// Exactly one master owns the slot of {fence}k; the others redirect.
	owner := -1
	for i, n := range c.Nodes {
		checkProcess(t, n.Process)
		v, err := redisDo(ctx, n.Addr(), "SET", "{fence}k", "v")
		switch {
		case err == nil && v == "OK":
			if owner >= 0 {
				t.Fatalf("nodes %d and %d both accepted the key", owner, i)
			}
			owner = i
		case err != nil && strings.HasPrefix(strings.TrimPrefix(err.Error(), "redis: "), "MOVED"):
		default:
			t.Fatalf("node %d: SET = %v, %v", i, v, err)
		}
	}
	if owner < 0 {
		t.Fatal("no node accepted the key")
	}
	n := c.Nodes[owner]
	n.Kill()
	timed(t, "redis cluster node restart", func() any { n.Restart(); c.WaitReady(); return nil })
	if v, err := redisDo(ctx, n.Addr(), "GET", "{fence}k"); err != nil || v != nil {
		t.Fatalf("GET after Restart = %v, %v; want nil (the node keeps its slots, not its data)", v, err)
	}
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	pg := timed(t, "postgres (initdb + start + create database)", func() *PostgresServer { return Postgres(t) })
	checkProcess(t, pg.Process)
	if os.Geteuid() == 0 {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pg.Pid()))
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" && f[1] == "0" {
				t.Fatal("postgres runs as root")
			}
		}
	}
	if want := "postgres://postgres@" + pg.Addr() + "/test?sslmode=disable"; pg.DSN() != want {
		t.Errorf("DSN() = %q, want %q", pg.DSN(), want)
	}
	ctx := testContext(t)
	for _, q := range []string{
		"CREATE TABLE kv (k text PRIMARY KEY, v text)",
		"INSERT INTO kv VALUES ('k', 'v1')",
	} {
		if _, err := pgQuery(ctx, pg.Addr(), "test", q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}

	pg.Stop()
	checkStopped(t, pg.Process)
	sctx, cancel := short()
	if _, err := pgQuery(sctx, pg.Addr(), "test", "SELECT 1"); err == nil {
		t.Fatal("postgres answered while stopped")
	}
	cancel()

	// Killed while stopped, backends and all: the restart must find no
	// leftover process holding the data directory's shared memory.
	tree := processTree(pg.Pid())
	pg.Kill()
	if alive := stillAlive(tree); len(alive) > 0 {
		t.Fatalf("processes %v of the killed server still run", alive)
	}
	timed(t, "postgres restart", func() any { pg.Restart(); return nil })
	rows, err := pgQuery(ctx, pg.Addr(), "test", "SELECT v FROM kv WHERE k = 'k'")
	if err != nil || len(rows) != 1 || rows[0][0] != "v1" {
		t.Fatalf("after Restart: rows %v, err %v; want [[v1]]: PostgreSQL must keep its data", rows, err)
	}
}

func TestMariaDB(t *testing.T) {
	t.Parallel()
	m := timed(t, "mariadbd (install-db + start + create database)", func() *MariaDBServer { return MariaDB(t) })
	checkProcess(t, m.Process)
	if want := "root@tcp(" + m.Addr() + ")/test"; m.DSN() != want {
		t.Errorf("DSN() = %q, want %q", m.DSN(), want)
	}
	ctx := testContext(t)
	for _, q := range []string{
		"CREATE TABLE kv (k VARCHAR(64) PRIMARY KEY, v TEXT)",
		"INSERT INTO kv VALUES ('k', 'v1')",
	} {
		if _, err := myQuery(ctx, m.Addr(), "test", q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	rows, err := myQuery(ctx, m.Addr(), "test", "SELECT v, NULL, GET_LOCK('fence', 0) FROM kv")
	if err != nil || len(rows) != 1 || strings.Join(rows[0], ",") != "v1,,1" {
		t.Fatalf("SELECT = %q, %v; want [[v1  1]]", rows, err)
	}

	m.Stop()
	checkStopped(t, m.Process)
	sctx, cancel := short()
	if _, err := myQuery(sctx, m.Addr(), "test", "SELECT 1"); err == nil {
		t.Fatal("mariadbd answered while stopped")
	}
	cancel()
	m.Cont()

	m.Kill()
	timed(t, "mariadbd restart", func() any { m.Restart(); return nil })
	rows, err = myQuery(ctx, m.Addr(), "test", "SELECT v FROM kv WHERE k = 'k'")
	if err != nil || len(rows) != 1 || rows[0][0] != "v1" {
		t.Fatalf("after Restart: rows %v, err %v; want [[v1]]: MariaDB must keep its data", rows, err)
	}
}

func TestRedisSentinel(t *testing.T) {
	t.Parallel()
	s := timed(t, "redis sentinel (master, replica, 3 sentinels)", func() *RedisSentinelServer { return RedisSentinel(t, 1, 3) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	seen := map[string]bool{}
	for _, p := range []*Process{s.Nodes[0].Process, s.Nodes[1].Process, s.Sentinels[0].Process, s.Sentinels[1].Process, s.Sentinels[2].Process} {
		checkProcess(t, p)
		if seen[p.Addr()] {
			t.Fatalf("two servers on %s", p.Addr())
		}
		seen[p.Addr()] = true
	}
	if len(s.Nodes) != 2 || len(s.SentinelAddrs()) != 3 || s.MasterName() == "" {
		t.Fatalf("%d nodes, sentinels %v, master name %q", len(s.Nodes), s.SentinelAddrs(), s.MasterName())
	}
	master, replica := s.Nodes[0], s.Nodes[1]
	if s.Master() != master || len(s.Replicas()) != 1 || s.Replicas()[0] != replica {
		t.Fatalf("Master() = %s, Replicas() = %v; want %s and [%s]", s.Master().Addr(), s.Replicas(), master.Addr(), replica.Addr())
	}
	namesMaster := func(want *RedisServer) {
		t.Helper()
		for _, addr := range s.SentinelAddrs() {
			v, err := redisDo(ctx, addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName())
			hp, _ := v.([]any)
			if err != nil || len(hp) != 2 || hp[0] != "127.0.0.1" || hp[1] != strconv.Itoa(want.Port()) {
				t.Fatalf("sentinel %s: get-master-addr-by-name = %v, %v; want %s", addr, v, err, want.Addr())
			}
		}
	}
	namesMaster(master)
	quick := func(sn *SentinelServer) {
		t.Helper()
		v, err := redisDo(ctx, sn.Addr(), "SENTINEL", "DEBUG")
		if _, old := err.(redisError); old {
			return // before Redis 7.0: Sentinel's own periods
		}
		if period := pairs(v)["INFO-PERIOD"]; err != nil || period != "1000" {
			t.Errorf("sentinel %s: INFO-PERIOD %q, %v; want 1000", sn.Addr(), period, err)
		}
	}
	for _, sn := range s.Sentinels {
		quick(sn)
	}

	// Writes reach the replica, which refuses writes of its own.
	if v, err := redisDo(ctx, master.Addr(), "SET", "k", "v1"); err != nil || v != "OK" {
		t.Fatalf("SET on the master = %v, %v", v, err)
	}
	if v, err := redisDo(ctx, master.Addr(), "WAIT", "1", "10000"); err != nil || v != int64(1) {
		t.Fatalf("WAIT 1 = %v, %v; want 1 replica", v, err)
	}
	if v, err := redisDo(ctx, replica.Addr(), "GET", "k"); err != nil || v != "v1" {
		t.Fatalf("GET on the replica = %v, %v", v, err)
	}
	if _, err := redisDo(ctx, replica.Addr(), "SET", "k", "x"); err == nil || !strings.Contains(err.Error(), "READONLY") {
		t.Fatalf("SET on the replica: %v; want READONLY", err)
	}

	// Killing the master makes the Sentinels promote the replica, with the
	// data it had.
	master.Kill()
	killed := time.Now()
	promoted := s.WaitFailover(master)
	t.Logf("failover took %v after the kill", time.Since(killed).Round(time.Millisecond))
	if promoted != replica || s.Master() != replica {
		t.Fatalf("WaitFailover = %s, Master() = %s; want the replica %s", promoted.Addr(), s.Master().Addr(), replica.Addr())
	}
	namesMaster(replica)
	if role, err := redisRole(ctx, replica.Addr()); err != nil || role[0] != "master" {
		t.Fatalf("promoted replica: ROLE %v, %v", role, err)
	}
	if v, err := redisDo(ctx, replica.Addr(), "GET", "k"); err != nil || v != "v1" {
		t.Fatalf("GET on the promoted replica = %v, %v", v, err)
	}
	if v, err := redisDo(ctx, replica.Addr(), "SET", "k", "v2"); err != nil || v != "OK" {
		t.Fatalf("SET on the promoted replica = %v, %v", v, err)
	}

	// The old master comes back empty and a master, and the Sentinels turn
	// it into a replica of the new one.
	timed(t, "old master restart and reconfiguration", func() any { master.Restart(); s.WaitReady(); return nil })
	role, err := redisRole(ctx, master.Addr())
	if err != nil || role[0] != "slave" || role[2] != int64(replica.Port()) {
		t.Fatalf("old master after restart: ROLE %v, %v; want a replica of %s", role, err, replica.Addr())
	}
	if v, err := redisDo(ctx, master.Addr(), "GET", "k"); err != nil || v != "v2" {
		t.Fatalf("GET on the old master, now a replica = %v, %v; want v2", v, err)
	}

	// A Sentinel keeps what it learned across a restart.
	sn := s.Sentinels[0]
	sn.Kill()
	sn.Restart()
	namesMaster(replica)
	quick(sn)
	s.WaitReady()

	// A restarted replica comes back empty and copies its master again.
	master.Kill()
	master.Restart()
	s.WaitReady()
	if v, err := redisDo(ctx, master.Addr(), "GET", "k"); err != nil || v != "v2" {
		t.Fatalf("GET on the restarted replica = %v, %v; want v2", v, err)
	}
	// No RDB file is left that a restart would load: data servers come
	// back empty.
	for _, n := range s.Nodes {
		if rdbs, _ := filepath.Glob(filepath.Join(n.dir, "*.rdb")); len(rdbs) > 0 {
			t.Errorf("%s left %v", n.Addr(), rdbs)
		}
	}
}

func TestClosedAddr(t *testing.T) {
	a, b := ClosedAddr(t), ClosedAddr(t)
	if a == b {
		t.Errorf("ClosedAddr twice = %s: want two ports", a)
	}
	for _, addr := range []string{a, b} {
		start := time.Now()
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err == nil {
			c.Close()
			t.Fatalf("dial %s succeeded; want a refusal", addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) || time.Since(start) > 5*time.Second {
			t.Errorf("dial %s: %v after %v; want a refusal at once", addr, err, time.Since(start))
		}
	}
}

func TestSilentAddr(t *testing.T) {
	addr := SilentAddr(t)
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v; want a connection", addr, err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read from %s: %d bytes, %v; want nothing until the deadline", addr, n, err)
	}
}

const envRerunChild = "TESTSERVER_TEST_RERUN_CHILD"

// TestRerun starts itself as a child, which waits to be killed.
func TestRerun(t *testing.T) {
	if os.Getenv(envRerunChild) != "" {
		fmt.Println("child of", t.Name(), "waits")
		time.Sleep(time.Minute)
		t.Error("child not killed")
		return
	}
	t.Run("sub test", func(t *testing.T) {
		c := Rerun(t, envRerunChild+"=1")
		deadline := time.Now().Add(30 * time.Second)
		for !strings.Contains(c.Output(), "child of TestRerun waits") {
			if time.Now().After(deadline) {
				t.Fatalf("child did not start its part; output:\n%s", c.Output())
			}
			time.Sleep(10 * time.Millisecond)
		}
		pid := c.Pid()
		c.Kill()
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("child %d after Kill: %v; want it gone", pid, err)
		}
		c.Kill() // again: nothing
	})
}
