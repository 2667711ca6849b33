package testserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisServer is a private redis-server with no persistence: a Restart
// brings it back empty, as a real Redis without AOF/RDB would after a crash.
type RedisServer struct {
	*Process
	password string // the default user's (Password), "" if none
}

// do sends one command, after AUTH with the server's password if it has
// one (see redisDo).
func (r *RedisServer) do(ctx context.Context, args ...string) (any, error) {
	return redisDoAs(ctx, r.Addr(), r.password, args...)
}

// role returns the server's reply to ROLE (see redisRole).
func (r *RedisServer) role(ctx context.Context) ([]any, error) {
	return roleReply(r.do(ctx, "ROLE"))
}

// URL returns "redis://127.0.0.1:port".
func (r *RedisServer) URL() string { return "redis://" + r.Addr() }

// Redis starts a private redis-server on a free loopback port
// (--save "" --appendonly no, its own directory). With Password it
// requires that password of every client; with Clock it runs on a
// FakeClock.
func Redis(t testing.TB, opts ...Option) *RedisServer {
	t.Helper()
	bin := Require(t, "redis-server")
	o := collect(opts)
	o.check(t, "Redis", credentials{password: true, clock: true})
	return startRedis(t, bin, redisSpec{}, o)
}

// Redises starts n independent redis-servers, as Redlock needs; with
// Clock, all of them on that one clock.
func Redises(t testing.TB, n int, opts ...Option) []*RedisServer {
	t.Helper()
	bin := Require(t, "redis-server")
	o := collect(opts)
	o.check(t, "Redises", credentials{password: true, clock: true})
	out := make([]*RedisServer, n)
	for i := range out {
		out[i] = startRedis(t, bin, redisSpec{}, o)
	}
	return out
}

// redisSpec says how a redis-server differs from a plain one.
type redisSpec struct {
	cluster bool // --cluster-enabled, with the cluster bus port (port+10000) free
	// nodeTimeout is a cluster node's cluster-node-timeout; 0 means 5 s.
	nodeTimeout time.Duration
	// conf, if set, is the content of a configuration file written once into
	// the server's directory and given before the arguments, so that CONFIG
	// REWRITE (which Sentinel sends) has a file to keep its role in across
	// restarts.
	conf string
	args []string // more arguments, before the Option ones
	// net, if set, runs the server on host of the test hosts net,
	// listening on the host's address (OnNet).
	net  *Net
	host int
}

func startRedis(t testing.TB, bin string, s redisSpec, o options) *RedisServer {
	t.Helper()
	dir := dataDir(t, "redis")
	var confPath string
	if s.conf != "" {
		confPath = filepath.Join(dir, "redis.conf")
		if err := os.WriteFile(confPath, []byte(s.conf), 0o644); err != nil {
			t.Fatalf("testserver: %v", err)
		}
	}
	var srv *RedisServer
	startRetrying(t, "redis-server", func() error {
		offset := 0
		if s.cluster {
			offset = 10000 // the cluster bus listens on port+10000
		}
		port, err := freePort(offset)
		if err != nil {
			return err
		}
		ip := memberIP(s.net, s.host)
		addr := net.JoinHostPort(ip, strconv.Itoa(port))
		var args []string
		if confPath != "" {
			args = append(args, confPath)
		}
		args = append(args,
			"--port", strconv.Itoa(port),
			"--bind", ip,
			"--save", "",
			"--appendonly", "no",
			"--dir", dir,
			"--daemonize", "no",
			"--logfile", "",
		)
		if s.net != nil {
			// Off loopback, a server without a password refuses every
			// client; the test hosts' network is the test's own.
			args = append(args, "--protected-mode", "no")
		}
		if s.cluster {
			timeout := 5 * time.Second
			if s.nodeTimeout > 0 {
				timeout = s.nodeTimeout
			}
			args = append(args,
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
				"--cluster-node-timeout", strconv.FormatInt(timeout.Milliseconds(), 10),
			)
		}
		if o.password != "" {
			// masterauth: a replica, or a master that Sentinel turns into
			// one, authenticates to its master with it.
			args = append(args, "--requirepass", o.password, "--masterauth", o.password)
		}
		args = append(args, s.args...)
		args = append(args, o.args...)
		srv = &RedisServer{password: o.password, Process: newProcess(t, procSpec{
			name: "redis-server",
			path: bin,
			args: args,
			dir:  dir,
			port: port,
			env:  o.clock.env(),
			net:  s.net,
			host: s.host,
			ping: func(ctx context.Context) error {
				v, err := redisDoAs(ctx, addr, o.password, "PING")
				if err == nil && v != "PONG" {
					err = fmt.Errorf("PING answered %q", v)
				}
				return err
			},
		})}
		return srv.start()
	})
	return srv
}

// RedisClusterServer is a Redis Cluster, each node a private redis-server
// with no persistence: masters only (RedisCluster), or masters with
// replicas (RedisClusterReplicas). Started OnNet, node i runs on host i;
// with Clock, every node runs on that clock.
type RedisClusterServer struct {
	// Nodes are every node, masters and replicas; which is which changes
	// with failovers: ask Masters and ReplicasOf.
	Nodes   []*RedisServer
	masters int // how many of Nodes are masters when the cluster is whole
	tb      testing.TB
}

// Addrs returns the nodes' addresses, "127.0.0.1:port" each (their hosts'
// addresses, OnNet).
func (c *RedisClusterServer) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// RedisCluster starts masters (at least 3) redis-servers in cluster mode,
// joins them with redis-cli --cluster create (no replicas), and waits until
// every node reports cluster_state:ok.
func RedisCluster(t testing.TB, masters int, opts ...Option) *RedisClusterServer {
	t.Helper()
	return redisCluster(t, "RedisCluster", masters, 0, 0, opts)
}

// RedisClusterFailoverTimeout is the cluster-node-timeout of the nodes of
// RedisClusterReplicas: a master that answers no ping for that long is
// failing, and one of its replicas is promoted a second or two later.
const RedisClusterFailoverTimeout = 2 * time.Second

// RedisClusterReplicas starts a Redis Cluster of masters (at least 3),
// each with replicas (at least 1) that replicate it, and waits until every
// node reports cluster_state:ok and every replica's link to its master is
// up. Nodes with cluster-node-timeout RedisClusterFailoverTimeout promote
// a replica of a master killed (or cut off, OnNet) for that long; the
// killed master, started again (empty, its nodes.conf kept), rejoins as a
// replica of the promoted one. OnNet, the net needs a host per node,
// masters*(1+replicas).
func RedisClusterReplicas(t testing.TB, masters, replicas int, opts ...Option) *RedisClusterServer {
	t.Helper()
	if replicas < 1 {
		t.Fatalf("testserver: RedisClusterReplicas needs at least 1 replica per master, got %d", replicas)
	}
	return redisCluster(t, "RedisClusterReplicas", masters, replicas, RedisClusterFailoverTimeout, opts)
}

func redisCluster(t testing.TB, what string, masters, replicas int, nodeTimeout time.Duration, opts []Option) *RedisClusterServer {
	t.Helper()
	if masters < 3 {
		t.Fatalf("testserver: %s needs at least 3 masters, got %d", what, masters)
	}
	bin := Require(t, "redis-server")
	cli := Require(t, "redis-cli")
	o := collect(opts)
	o.check(t, what, credentials{net: replicas > 0, clock: true})
	nodes := masters * (1 + replicas)
	if o.net != nil && o.net.Len() < nodes {
		t.Fatalf("testserver: %s of %d nodes on a net of %d hosts", what, nodes, o.net.Len())
	}
	c := &RedisClusterServer{masters: masters, tb: t}
	// Replicas sync over the socket and leave no RDB file behind, so a
	// restarted node always comes back empty.
	var args []string
	if replicas > 0 {
		args = []string{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0", "--rdb-del-sync-files", "yes"}
	}
	for i := range nodes {
		c.Nodes = append(c.Nodes, startRedis(t, bin, redisSpec{cluster: true, nodeTimeout: nodeTimeout, args: args, net: o.net, host: i}, o))
	}
	cargs := append([]string{"--cluster", "create"}, c.Addrs()...)
	cargs = append(cargs, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, cargs...).CombinedOutput()
	if err != nil {
		t.Fatalf("testserver: %s %s: %v\n%s", cli, quoteArgs(cargs), err, out)
	}
	c.WaitReady()
	return c
}

// WaitReady waits until every running node reports cluster_state:ok and
// knows every other node, and every running replica's link to its master
// is up, as after a node's Restart; with every node running, until as many
// answer ROLE as masters as the cluster was made with (a killed master
// started again believes it is one until the others tell it of its
// replica's promotion). It fails the test after ReadyTimeout.
//
// Started OnNet, the nodes can be cut apart (Net.Isolate): a master cut
// from the others stops taking writes (CLUSTERDOWN) once it has missed
// the majority for cluster-node-timeout, and the majority promotes its
// replica about then; healed, it learns of the promotion and turns into
// that replica's replica.
func (c *RedisClusterServer) WaitReady() {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	for {
		n, why := c.health(ctx)
		if why == "" {
			return
		}
		select {
		case <-ctx.Done():
			if n == nil {
				c.tb.Fatalf("testserver: redis cluster not ready after %v: %s", ReadyTimeout, why)
			}
			c.tb.Fatalf("testserver: redis cluster node %s not ok after %v: %s\nlog:\n%s",
				n.Addr(), ReadyTimeout, why, n.LogTail())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// health returns what keeps the cluster from being whole, and the node it
// concerns (nil if none in particular), or "".
func (c *RedisClusterServer) health(ctx context.Context) (*RedisServer, string) {
	masters, all := 0, true
	for _, n := range c.Nodes {
		if n.Pid() == 0 {
			all = false
			continue
		}
		if why := c.nodeHealth(ctx, n); why != "" {
			return n, why
		}
		if role, err := n.role(ctx); err != nil {
			return n, err.Error()
		} else if role[0] == "master" {
			masters++
		}
	}
	if all && masters != c.masters {
		return nil, fmt.Sprintf("%d nodes answer ROLE as masters, want %d", masters, c.masters)
	}
	return nil, ""
}

// nodeHealth returns what keeps node n from being whole, or "".
func (c *RedisClusterServer) nodeHealth(ctx context.Context, n *RedisServer) string {
	v, err := redisDo(ctx, n.Addr(), "CLUSTER", "INFO")
	if err != nil {
		return err.Error()
	}
	info, _ := v.(string)
	if !strings.Contains(info, "cluster_state:ok") ||
		!strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d\r", len(c.Nodes))) {
		return info
	}
	role, err := n.role(ctx)
	if err != nil {
		return err.Error()
	}
	if role[0] == "slave" && (len(role) < 4 || role[3] != "connected") {
		return fmt.Sprintf("ROLE %v", role)
	}
	return ""
}

// Masters returns the running nodes that answer ROLE as masters. It fails
// the test if a running node does not answer.
func (c *RedisClusterServer) Masters() []*RedisServer {
	c.tb.Helper()
	var out []*RedisServer
	for _, n := range c.Nodes {
		if role := c.roleOf(n); role != nil && role[0] == "master" {
			out = append(out, n)
		}
	}
	return out
}

// ReplicasOf returns the running nodes that answer ROLE as replicas of m.
// It fails the test if a running node does not answer.
func (c *RedisClusterServer) ReplicasOf(m *RedisServer) []*RedisServer {
	c.tb.Helper()
	var out []*RedisServer
	for _, n := range c.Nodes {
		role := c.roleOf(n)
		if role != nil && role[0] == "slave" && len(role) >= 3 &&
			net.JoinHostPort(fmt.Sprint(role[1]), fmt.Sprint(role[2])) == m.Addr() {
			out = append(out, n)
		}
	}
	return out
}

// roleOf returns n's reply to ROLE, nil if n is not running.
func (c *RedisClusterServer) roleOf(n *RedisServer) []any {
	c.tb.Helper()
	if n.Pid() == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	role, err := n.role(ctx)
	if err != nil {
		c.tb.Fatalf("testserver: redis cluster node %s: ROLE: %v", n.Addr(), err)
	}
	return role
}

// WaitFailover waits until one of replicas (old's, as ReplicasOf named
// them before old went down) answers ROLE as a master and no running node
// names old in CLUSTER SLOTS any more, and returns it: old's replica
// promoted in its place. Kill or Stop old first. It fails the test after
// ReadyTimeout.
func (c *RedisClusterServer) WaitFailover(old *RedisServer, replicas []*RedisServer) *RedisServer {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	for {
		promoted, why := c.takenOver(ctx, old, replicas)
		if promoted != nil {
			return promoted
		}
		select {
		case <-ctx.Done():
			c.tb.Fatalf("testserver: redis cluster: no failover from %s after %v: %s", old.Addr(), ReadyTimeout, why)
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// takenOver returns the one of replicas that is a master now, once no
// running node names old for a slot; else why not.
func (c *RedisClusterServer) takenOver(ctx context.Context, old *RedisServer, replicas []*RedisServer) (*RedisServer, string) {
	for _, n := range c.Nodes {
		if n == old || n.Pid() == 0 {
			continue
		}
		v, err := redisDo(ctx, n.Addr(), "CLUSTER", "SLOTS")
		if err != nil {
			return nil, fmt.Sprintf("%s: CLUSTER SLOTS: %v", n.Addr(), err)
		}
		ranges, _ := v.([]any)
		if len(ranges) == 0 {
			return nil, fmt.Sprintf("%s: CLUSTER SLOTS answered %v", n.Addr(), v)
		}
		for _, r := range ranges {
			f, _ := r.([]any)
			if len(f) < 3 {
				return nil, fmt.Sprintf("%s: CLUSTER SLOTS range %v", n.Addr(), r)
			}
			hp, _ := f[2].([]any)
			if len(hp) < 2 {
				return nil, fmt.Sprintf("%s: CLUSTER SLOTS master %v", n.Addr(), f[2])
			}
			if addr := net.JoinHostPort(fmt.Sprint(hp[0]), fmt.Sprint(hp[1])); addr == old.Addr() {
				return nil, fmt.Sprintf("%s still names %s for slots %v-%v", n.Addr(), addr, f[0], f[1])
			}
		}
	}
	for _, r := range replicas {
		if r.Pid() == 0 {
			continue
		}
		if role, err := r.role(ctx); err == nil && role[0] == "master" {
			return r, ""
		}
	}
	return nil, "none of old's replicas is a master yet"
}

// redisDo sends one command over a fresh connection and returns the reply:
// string (simple or bulk), int64, nil, []any, or an error for an error reply.
func redisDo(ctx context.Context, addr string, args ...string) (any, error) {
	return redisDoAs(ctx, addr, "", args...)
}

// redisDoAs is redisDo after AUTH with password, unless it is "".
func redisDoAs(ctx context.Context, addr, password string, args ...string) (any, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	var b strings.Builder
	command := func(args ...string) {
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if password != "" {
		command("AUTH", password)
	}
	command(args...)
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return nil, err
	}
	r := bufio.NewReader(conn)
	if password != "" {
		if _, err := readRESP(r); err != nil {
			return nil, fmt.Errorf("AUTH: %w", err)
		}
	}
	return readRESP(r)
}

type redisError string

func (e redisError) Error() string { return "redis: " + string(e) }

func readRESP(r *bufio.Reader) (any, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("redis: empty reply line")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-':
		return nil, redisError(line[1:])
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return nil, err
		}
		out := make([]any, n)
		for i := range out {
			if out[i], err = readRESP(r); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("redis: unexpected reply %q", line)
}
