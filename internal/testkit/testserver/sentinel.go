package testserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Sentinel timings: a master that answers nothing for SentinelDownAfter is
// down, and a failover then takes a few seconds. SentinelFailoverTimeout
// bounds each step of a failover; a Sentinel tries again after twice that.
const (
	SentinelDownAfter       = 2 * time.Second
	SentinelFailoverTimeout = 4 * time.Second
)

// sentinelMasterName is the name the Sentinels monitor the master under.
const sentinelMasterName = "fence-master"

// RedisSentinelServer is a Redis master with replicas, watched by Redis
// Sentinels, all private processes on loopback (or on test hosts, OnNet)
// with no persistence.
//
// The data servers keep their role in a configuration file that Sentinel
// rewrites (CONFIG REWRITE), as in a real deployment: a promoted replica
// restarts as a master, a master that was failed over restarts as a master
// too (it never heard of the failover) until the Sentinels turn it into a
// replica of the new master, some seconds after they see it again. Every
// restart of a data server brings it back empty; a replica then copies its
// master's data again.
type RedisSentinelServer struct {
	// Nodes are the data servers: Nodes[0] started as the master, the others
	// as its replicas. After a failover, Master tells which is the master.
	Nodes []*RedisServer
	// Sentinels monitor the master under MasterName, with a quorum of a
	// majority of them.
	Sentinels []*SentinelServer

	tb testing.TB
}

// SentinelServer is a redis-server in Sentinel mode. Its configuration file,
// in its own directory, is where Sentinel keeps what it learns (the current
// master, the replicas and the other Sentinels); it survives Kill and
// Restart, as a real Sentinel's does.
type SentinelServer struct {
	*Process
	password string // its own (SentinelPassword), "" if none
}

// do sends one command, after AUTH with the Sentinel's password if it has
// one (see redisDo).
func (s *SentinelServer) do(ctx context.Context, args ...string) (any, error) {
	return redisDoAs(ctx, s.Addr(), s.password, args...)
}

// MasterName returns the name the Sentinels know the master by, as
// go-redis's FailoverOptions.MasterName takes it.
func (s *RedisSentinelServer) MasterName() string { return sentinelMasterName }

// SentinelAddrs returns the Sentinels' addresses, "127.0.0.1:port" each
// (their hosts' addresses, OnNet), as
// go-redis's FailoverOptions.SentinelAddrs takes them.
func (s *RedisSentinelServer) SentinelAddrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		out[i] = sn.Addr()
	}
	return out
}

// RedisSentinel starts a master redis-server, replicas (at least 1) that
// replicate it (replicaof), and sentinels (at least 1) Sentinels that
// monitor it with a quorum of sentinels/2+1, down-after-milliseconds
// SentinelDownAfter and failover-timeout SentinelFailoverTimeout. It returns
// once WaitReady does. opts apply to the data servers, not the Sentinels,
// but for SentinelPassword; the Sentinels are given the data servers'
// Password. With Clock the data servers run on that clock, the Sentinels
// on the machine's (a Sentinel whose clock jumps stops acting for a
// while: TILT mode).
//
// OnNet, data server i and Sentinel i run on host i, as a deployment
// runs a Sentinel beside each Redis (the net needs as many hosts as the
// larger of the two counts). A master cut from its replicas and the
// other Sentinels (Net.Isolate) goes on taking writes from its clients;
// the Sentinels of the majority promote a replica (MajorityMaster names
// it), the cut-off Sentinel still names the old master, and after Heal
// the Sentinels turn the old master into a replica of the new one, which
// drops what it took meanwhile.
func RedisSentinel(t testing.TB, replicas, sentinels int, opts ...Option) *RedisSentinelServer {
	t.Helper()
	if replicas < 1 || sentinels < 1 {
		t.Fatalf("testserver: RedisSentinel needs at least 1 replica and 1 sentinel, got %d and %d", replicas, sentinels)
	}
	bin := Require(t, "redis-server")
	o := collect(opts)
	o.check(t, "RedisSentinel", credentials{password: true, sentinelPassword: true, net: true, clock: true})
	if o.net != nil && o.net.Len() < max(1+replicas, sentinels) {
		t.Fatalf("testserver: RedisSentinel of %d data servers and %d Sentinels on a net of %d hosts", 1+replicas, sentinels, o.net.Len())
	}
	s := &RedisSentinelServer{tb: t}
	// Replicas sync over the socket at once (no RDB file, no 5 second wait
	// for more replicas), and delete any RDB file a sync leaves, so a
	// restarted server always comes back empty.
	args := []string{
		"--repl-diskless-sync", "yes",
		"--repl-diskless-sync-delay", "0",
		"--rdb-del-sync-files", "yes",
	}
	master := startRedis(t, bin, redisSpec{conf: "# fence test master\n", args: args, net: o.net}, o)
	s.Nodes = append(s.Nodes, master)
	masterHost, _, _ := net.SplitHostPort(master.Addr())
	for i := range replicas {
		conf := fmt.Sprintf("# fence test replica\nreplicaof %s %d\n", masterHost, master.Port())
		s.Nodes = append(s.Nodes, startRedis(t, bin, redisSpec{conf: conf, args: args, net: o.net, host: 1 + i}, o))
	}
	for i := range sentinels {
		s.Sentinels = append(s.Sentinels, startSentinel(t, bin, masterHost, master.Port(), sentinels/2+1, i, o))
	}
	s.WaitReady()
	return s
}

// startSentinel starts a Sentinel (on host of o.net, if set) monitoring
// the master at masterHost:masterPort, which requires o.password (if set)
// of its clients, and that requires o.sentinelPassword (if set) of its
// own.
func startSentinel(t testing.TB, bin, masterHost string, masterPort, quorum, host int, o options) *SentinelServer {
	t.Helper()
	dir := dataDir(t, "redis-sentinel")
	conf := filepath.Join(dir, "sentinel.conf")
	ip := memberIP(o.net, host)
	var sn *SentinelServer
	startRetrying(t, "redis-sentinel", func() error {
		port, err := freePort(0)
		if err != nil {
			return err
		}
		// Sentinel rewrites this file as it learns; it is written once per
		// start attempt, before the first start, never on Restart.
		name := sentinelMasterName
		lines := []string{
			"port " + strconv.Itoa(port),
			"bind " + ip,
			"daemonize no",
			`logfile ""`,
			"dir " + dir,
			fmt.Sprintf("sentinel monitor %s %s %d %d", name, masterHost, masterPort, quorum),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", name, SentinelDownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s %d", name, SentinelFailoverTimeout.Milliseconds()),
			fmt.Sprintf("sentinel parallel-syncs %s 1", name),
		}
		if o.net != nil {
			lines = append(lines, "protected-mode no") // see startRedis
		}
		if o.password != "" {
			lines = append(lines, fmt.Sprintf("sentinel auth-pass %s %s", name, o.password))
		}
		if o.sentinelPassword != "" {
			// A Sentinel gives its own requirepass to the other Sentinels.
			lines = append(lines, "requirepass "+o.sentinelPassword)
		}
		text := strings.Join(lines, "\n") + "\n"
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			return err
		}
		addr := net.JoinHostPort(ip, strconv.Itoa(port))
		sn = &SentinelServer{password: o.sentinelPassword, Process: newProcess(t, procSpec{
			name: "redis-sentinel",
			path: bin,
			args: []string{conf, "--sentinel"},
			dir:  dir,
			port: port,
			net:  o.net,
			host: host,
			ping: func(ctx context.Context) error {
				v, err := redisDoAs(ctx, addr, o.sentinelPassword, "PING")
				if err == nil && v != "PONG" {
					err = fmt.Errorf("PING answered %q", v)
				}
				if err != nil {
					return err
				}
				return sentinelQuicken(ctx, addr, o.sentinelPassword)
			},
		})}
		return sn.start()
	})
	return sn
}

// sentinelQuicken shortens Sentinel's fixed periods (SENTINEL DEBUG, Redis
// 7.0 and later; it is not kept in the configuration, so it is sent at
// every start). Sentinel asks replicas for INFO every 10 seconds, and only
// turns a returning old master into a replica 4 publish periods (8 seconds)
// after an INFO showed it as a master: a restarted old master would rejoin
// after some 20 seconds. A Sentinel whose clock seems to jump by 2 seconds
// (a process starved on a loaded machine) stops acting for the tilt period,
// 30 seconds, which a test waiting for a failover would wait out. Older
// Sentinels refuse the command and keep their periods: slower, not wrong.
func sentinelQuicken(ctx context.Context, addr, password string) error {
	_, err := redisDoAs(ctx, addr, password, "SENTINEL", "DEBUG",
		"info-period", "1000", "publish-period", "1000", "tilt-period", "5000")
	if _, refused := err.(redisError); refused {
		return nil
	}
	return err
}

// WaitReady waits until the setup is whole again, as after it started or
// after a Restart: every running Sentinel names the same master, sees it up
// (not down, no failover in progress), knows every other Sentinel and sees
// every running replica connected; that master answers ROLE as a master;
// every other running data server is its replica with the link up. It
// fails the test after ReadyTimeout.
func (s *RedisSentinelServer) WaitReady() {
	s.tb.Helper()
	s.waitFor("ready", func(ctx context.Context) (string, bool) {
		why := s.health(ctx)
		return why, why == ""
	})
}

// Master returns the data server the Sentinels name as the master now. It
// fails the test if no running Sentinel answers or they name a server that
// is not one of Nodes.
func (s *RedisSentinelServer) Master() *RedisServer {
	s.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	addr, err := s.masterAddr(ctx)
	if err != nil {
		s.tb.Fatalf("testserver: redis sentinel: %v", err)
	}
	n := s.node(addr)
	if n == nil {
		s.tb.Fatalf("testserver: redis sentinel: the master %s is none of the data servers", addr)
	}
	return n
}

// Replicas returns the data servers other than Master().
func (s *RedisSentinelServer) Replicas() []*RedisServer {
	s.tb.Helper()
	m := s.Master()
	var out []*RedisServer
	for _, n := range s.Nodes {
		if n != m {
			out = append(out, n)
		}
	}
	return out
}

// WaitFailover waits until every running Sentinel names a master other than
// old and that server answers ROLE as a master, and returns it. Kill or
// Stop old first. It fails the test after ReadyTimeout.
func (s *RedisSentinelServer) WaitFailover(old *RedisServer) *RedisServer {
	s.tb.Helper()
	var promoted *RedisServer
	s.waitFor("failover from "+old.Addr(), func(ctx context.Context) (string, bool) {
		addr, err := s.masterAddr(ctx)
		if err != nil {
			return err.Error(), false
		}
		if addr == old.Addr() {
			return "the Sentinels still name " + addr, false
		}
		n := s.node(addr)
		if n == nil {
			return "the Sentinels name " + addr + ", none of the data servers", false
		}
		if role, err := n.role(ctx); err != nil || role[0] != "master" {
			return fmt.Sprintf("%s: ROLE %v, %v", addr, role, err), false
		}
		promoted = n
		return "", true
	})
	return promoted
}

// waitFor polls check until it reports done, and fails the test with the
// last reason it gave after ReadyTimeout.
func (s *RedisSentinelServer) waitFor(what string, check func(ctx context.Context) (why string, done bool)) {
	s.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		why, done := check(cctx)
		ccancel()
		if done {
			return
		}
		select {
		case <-ctx.Done():
			s.tb.Fatalf("testserver: redis sentinel: not %s after %v: %s", what, ReadyTimeout, why)
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// MajorityMaster returns the data server that a majority of all the
// Sentinels name as the master: during a partition, the one the
// Sentinels on the majority's side promoted, while a cut-off Sentinel
// may still name the old one. It returns an error (it does not fail the
// test) when no majority names one server, so any goroutine may call it.
func (s *RedisSentinelServer) MajorityMaster(ctx context.Context) (*RedisServer, error) {
	votes := map[string]int{}
	var errs []string
	for _, sn := range s.Sentinels {
		if sn.Pid() == 0 {
			continue
		}
		addr, err := sn.master(ctx)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		votes[addr]++
	}
	for addr, v := range votes {
		if v > len(s.Sentinels)/2 {
			if n := s.node(addr); n != nil {
				return n, nil
			}
			return nil, fmt.Errorf("a majority of the Sentinels name %s, none of the data servers", addr)
		}
	}
	return nil, fmt.Errorf("no majority of the %d Sentinels names one master: %v %s", len(s.Sentinels), votes, strings.Join(errs, "; "))
}

// master returns the master's address as this Sentinel names it.
func (s *SentinelServer) master(ctx context.Context) (string, error) {
	v, err := s.do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", sentinelMasterName)
	if err != nil {
		return "", fmt.Errorf("sentinel %s: %v", s.Addr(), err)
	}
	hp, ok := v.([]any)
	if !ok || len(hp) != 2 {
		return "", fmt.Errorf("sentinel %s: get-master-addr-by-name answered %v", s.Addr(), v)
	}
	return net.JoinHostPort(fmt.Sprint(hp[0]), fmt.Sprint(hp[1])), nil
}

// masterAddr returns the master every running Sentinel names; an error if
// none runs, one does not answer, or they disagree.
func (s *RedisSentinelServer) masterAddr(ctx context.Context) (string, error) {
	addr := ""
	for _, sn := range s.Sentinels {
		if sn.Pid() == 0 {
			continue
		}
		a, err := sn.master(ctx)
		if err != nil {
			return "", err
		}
		if addr != "" && a != addr {
			return "", fmt.Errorf("sentinels disagree on the master: %s and %s", addr, a)
		}
		addr = a
	}
	if addr == "" {
		return "", fmt.Errorf("no sentinel is running")
	}
	return addr, nil
}

func (s *RedisSentinelServer) node(addr string) *RedisServer {
	for _, n := range s.Nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// health returns what keeps the setup from being whole, or "" when it is.
func (s *RedisSentinelServer) health(ctx context.Context) string {
	master, err := s.masterAddr(ctx)
	if err != nil {
		return err.Error()
	}
	m := s.node(master)
	if m == nil || m.Pid() == 0 {
		return "the Sentinels name " + master + ", which is not a running data server"
	}
	if role, err := m.role(ctx); err != nil || role[0] != "master" {
		return fmt.Sprintf("master %s: ROLE %v, %v", master, role, err)
	}
	var replicas []string
	for _, n := range s.Nodes {
		if n == m || n.Pid() == 0 {
			continue
		}
		replicas = append(replicas, n.Addr())
		role, err := n.role(ctx)
		if err != nil || len(role) < 4 || role[0] != "slave" ||
			net.JoinHostPort(fmt.Sprint(role[1]), fmt.Sprint(role[2])) != master || role[3] != "connected" {
			return fmt.Sprintf("replica %s: ROLE %v, %v; want connected to %s", n.Addr(), role, err, master)
		}
	}
	for _, sn := range s.Sentinels {
		if sn.Pid() == 0 {
			continue
		}
		v, err := sn.do(ctx, "SENTINEL", "MASTER", sentinelMasterName)
		if err != nil {
			return fmt.Sprintf("sentinel %s: %v", sn.Addr(), err)
		}
		info := pairs(v)
		if info["flags"] != "master" {
			return fmt.Sprintf("sentinel %s: master flags %q", sn.Addr(), info["flags"])
		}
		if want := strconv.Itoa(len(s.Sentinels) - 1); info["num-other-sentinels"] != want {
			return fmt.Sprintf("sentinel %s: knows %s other sentinels, want %s", sn.Addr(), info["num-other-sentinels"], want)
		}
		v, err = sn.do(ctx, "SENTINEL", "REPLICAS", sentinelMasterName)
		if err != nil {
			return fmt.Sprintf("sentinel %s: %v", sn.Addr(), err)
		}
		seen := map[string]map[string]string{}
		list, _ := v.([]any)
		for _, r := range list {
			info := pairs(r)
			seen[net.JoinHostPort(info["ip"], info["port"])] = info
		}
		for _, r := range replicas {
			info := seen[r]
			if info == nil || info["flags"] != "slave" || info["master-link-status"] != "ok" ||
				net.JoinHostPort(info["master-host"], info["master-port"]) != master {
				return fmt.Sprintf("sentinel %s: replica %s: %v", sn.Addr(), r, info)
			}
		}
	}
	return ""
}

// redisRole returns the reply to ROLE: ["master", offset, replicas] or
// ["slave", host, port, state, offset], with the numbers as int64.
func redisRole(ctx context.Context, addr string) ([]any, error) {
	return roleReply(redisDo(ctx, addr, "ROLE"))
}

// roleReply checks a reply to ROLE (see redisRole).
func roleReply(v any, err error) ([]any, error) {
	if err != nil {
		return []any{""}, err
	}
	role, ok := v.([]any)
	if !ok || len(role) == 0 {
		return []any{""}, fmt.Errorf("ROLE answered %v", v)
	}
	return role, nil
}

// pairs turns a flat [k1, v1, k2, v2, ...] reply into a map.
func pairs(v any) map[string]string {
	list, _ := v.([]any)
	out := make(map[string]string, len(list)/2)
	for i := 0; i+1 < len(list); i += 2 {
		out[fmt.Sprint(list[i])] = fmt.Sprint(list[i+1])
	}
	return out
}
