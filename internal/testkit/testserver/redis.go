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
// requires that password of every client.
func Redis(t testing.TB, opts ...Option) *RedisServer {
	t.Helper()
	bin := Require(t, "redis-server")
	o := collect(opts)
	o.check(t, "Redis", credentials{password: true})
	return startRedis(t, bin, redisSpec{}, o)
}

// Redises starts n independent redis-servers, as Redlock needs.
func Redises(t testing.TB, n int, opts ...Option) []*RedisServer {
	t.Helper()
	bin := Require(t, "redis-server")
	o := collect(opts)
	o.check(t, "Redises", credentials{password: true})
	out := make([]*RedisServer, n)
	for i := range out {
		out[i] = startRedis(t, bin, redisSpec{}, o)
	}
	return out
}

// redisSpec says how a redis-server differs from a plain one.
type redisSpec struct {
	cluster bool // --cluster-enabled, with the cluster bus port (port+10000) free
	// conf, if set, is the content of a configuration file written once into
	// the server's directory and given before the arguments, so that CONFIG
	// REWRITE (which Sentinel sends) has a file to keep its role in across
	// restarts.
	conf string
	args []string // more arguments, before the Option ones
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
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		var args []string
		if confPath != "" {
			args = append(args, confPath)
		}
		args = append(args,
			"--port", strconv.Itoa(port),
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--dir", dir,
			"--daemonize", "no",
			"--logfile", "",
		)
		if s.cluster {
			args = append(args,
				"--cluster-enabled", "yes",
				"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
				"--cluster-node-timeout", "5000",
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

// RedisClusterServer is a Redis Cluster of masters only, each a private
// redis-server with no persistence.
type RedisClusterServer struct {
	Nodes []*RedisServer
	tb    testing.TB
}

// Addrs returns the nodes' addresses, "127.0.0.1:port" each.
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
	if masters < 3 {
		t.Fatalf("testserver: RedisCluster needs at least 3 masters, got %d", masters)
	}
	bin := Require(t, "redis-server")
	cli := Require(t, "redis-cli")
	o := collect(opts)
	o.check(t, "RedisCluster", credentials{})
	c := &RedisClusterServer{tb: t}
	for range masters {
		c.Nodes = append(c.Nodes, startRedis(t, bin, redisSpec{cluster: true}, o))
	}
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("testserver: %s %s: %v\n%s", cli, quoteArgs(args), err, out)
	}
	c.WaitReady()
	return c
}

// WaitReady waits until every node reports cluster_state:ok and knows every
// other node, as after a node's Restart. It fails the test after
// ReadyTimeout.
func (c *RedisClusterServer) WaitReady() {
	c.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	for _, n := range c.Nodes {
		var last string
		for {
			v, err := redisDo(ctx, n.Addr(), "CLUSTER", "INFO")
			if err != nil {
				last = err.Error()
			} else {
				last, _ = v.(string)
				if strings.Contains(last, "cluster_state:ok") &&
					strings.Contains(last, fmt.Sprintf("cluster_known_nodes:%d\r", len(c.Nodes))) {
					break
				}
			}
			select {
			case <-ctx.Done():
				c.tb.Fatalf("testserver: redis cluster node %s not ok after %v: %s\nlog:\n%s",
					n.Addr(), ReadyTimeout, last, n.LogTail())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
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
