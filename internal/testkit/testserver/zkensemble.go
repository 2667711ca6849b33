package testserver

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ZooKeeperEnsembleServer is a private ZooKeeper ensemble: n servers
// (QuorumPeerMain, each in its own JVM with its own zoo.cfg, myid and data
// directory) on loopback client, quorum and election ports. Every write
// goes through the leader; killing it makes the others elect another, and
// a client's session moves to a server it can reach.
type ZooKeeperEnsembleServer struct {
	Servers []*ZooKeeperServer
}

// Addrs returns every server's client address, host:port.
func (e *ZooKeeperEnsembleServer) Addrs() []string {
	out := make([]string, len(e.Servers))
	for i, s := range e.Servers {
		out[i] = s.Addr()
	}
	return out
}

// Leader returns the server that says it leads (srvr's "Mode: leader"),
// or nil if none does yet.
func (e *ZooKeeperEnsembleServer) Leader(ctx context.Context) *ZooKeeperServer {
	for _, s := range e.Servers {
		if out, err := zkFourLetter(ctx, s.Addr(), "srvr"); err == nil && strings.Contains(out, "Mode: leader") {
			return s
		}
	}
	return nil
}

// Mode returns the server's mode as its srvr answer names it (leader,
// follower, standalone), or "" when it does not serve: a member that has
// lost its quorum.
func (s *ZooKeeperServer) Mode(ctx context.Context) (string, error) {
	out, err := zkFourLetter(ctx, s.Addr(), "srvr")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(m), nil
		}
	}
	if strings.Contains(out, "not currently serving") {
		return "", nil
	}
	return "", fmt.Errorf("testserver: zookeeper %s: srvr answered %q", s.Addr(), out)
}

// ZooKeeperEnsemble starts an ensemble of n servers and waits until each
// serves (srvr reports its mode: leader or follower, which needs a
// quorum). Options' Args are extra zoo.cfg lines for every server.
func ZooKeeperEnsemble(t testing.TB, n int, opts ...Option) *ZooKeeperEnsembleServer {
	t.Helper()
	if n < 1 {
		t.Fatalf("testserver: ZooKeeperEnsemble needs at least 1 server, got %d", n)
	}
	java, jvm := zkJVM(t)
	o := collect(opts)
	o.check(t, "ZooKeeperEnsemble", credentials{net: true, clock: true})
	if o.net != nil && o.net.Len() < n {
		t.Fatalf("testserver: ZooKeeperEnsemble of %d servers on a net of %d hosts", n, o.net.Len())
	}
	base := dataDir(t, "zk-ensemble")
	e := &ZooKeeperEnsembleServer{}
	startRetrying(t, fmt.Sprintf("ZooKeeper ensemble of %d", n), func() error {
		// Three ports a server: clients, followers to the leader, and
		// leader election.
		ports := make([][3]int, n)
		var peers []string
		for i := range n {
			for j := range 3 {
				p, err := freePort(0)
				if err != nil {
					return err
				}
				ports[i][j] = p
			}
			peers = append(peers, fmt.Sprintf("server.%d=%s:%d:%d", i+1, memberIP(o.net, i), ports[i][1], ports[i][2]))
		}
		e.Servers = make([]*ZooKeeperServer, n)
		for i := range n {
			dir := filepath.Join(base, "s"+strconv.Itoa(i+1))
			if err := os.RemoveAll(dir); err != nil { // a failed attempt's state
				return err
			}
			data := filepath.Join(dir, "data")
			if err := os.MkdirAll(data, 0o700); err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(data, "myid"), []byte(strconv.Itoa(i+1)+"\n"), 0o644); err != nil {
				return err
			}
			lines := append([]string{
				"tickTime=" + strconv.Itoa(int(ZooKeeperTick/time.Millisecond)),
				"initLimit=50", // ticks: a follower syncing with a new leader, on a loaded machine
				"syncLimit=10",
				"maxSessionTimeout=60000",
				"dataDir=" + data,
				"clientPort=" + strconv.Itoa(ports[i][0]),
				"clientPortAddress=" + memberIP(o.net, i),
				"admin.enableServer=false",
				"4lw.commands.whitelist=*",
				"maxClientCnxns=0",
			}, peers...)
			lines = append(lines, o.args...)
			cfg := filepath.Join(dir, "zoo.cfg")
			if err := os.WriteFile(cfg, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
				return err
			}
			addr := net.JoinHostPort(memberIP(o.net, i), strconv.Itoa(ports[i][0]))
			e.Servers[i] = &ZooKeeperServer{}
			e.Servers[i].Process = newProcess(t, procSpec{
				name: "zookeeper-" + strconv.Itoa(i+1),
				path: java,
				args: append(slices.Clone(jvm), "org.apache.zookeeper.server.quorum.QuorumPeerMain", cfg),
				env:  o.clock.env(),
				dir:  dir,
				port: ports[i][0],
				net:  o.net,
				host: i,
				ping: func(ctx context.Context) error {
					out, err := zkFourLetter(ctx, addr, "srvr")
					if err == nil && !strings.Contains(out, "Mode: ") {
						err = fmt.Errorf("srvr: %s", strings.TrimSpace(out))
					}
					return err
				},
			})
		}
		// Start the servers together: none serves before a quorum has
		// elected a leader.
		ps := make([]*Process, n)
		for i, s := range e.Servers {
			ps[i] = s.Process
		}
		return startTogether(ps)
	})
	return e
}

// ReplaceEmpty brings server i back the way an operator replaces a server
// whose disk was lost in a static ensemble: it kills the server, removes
// its transaction log and snapshots (keeping its myid), and starts it
// again; it joins as a follower and takes the leader's state. That is safe
// while the others, a quorum, keep theirs: an empty server never wins an
// election against one with data. Unlike Restart it returns its error, so
// any goroutine may call it.
func (e *ZooKeeperEnsembleServer) ReplaceEmpty(i int) error {
	if i < 0 || i >= len(e.Servers) || len(e.Servers) < 3 {
		return fmt.Errorf("testserver: ReplaceEmpty(%d) of an ensemble of %d (needs 3 servers at least)", i, len(e.Servers))
	}
	s := e.Servers[i]
	s.Kill()
	if err := os.RemoveAll(filepath.Join(s.dir, "data", "version-2")); err != nil {
		return err
	}
	return s.start()
}
