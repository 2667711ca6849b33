package testserver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// NATSClusterServer is a private cluster of nats-servers with JetStream,
// each its own process with its own data directory and client port,
// routed to the others on loopback. A stream (a KV bucket) with 3
// replicas lives on three of them and is led by one; killing its leader
// makes the others elect another.
type NATSClusterServer struct {
	Servers []*NATSServer
	names   []string // each server's server_name, as JetStream reports a leader
}

// URL returns every server's client URL, comma-separated, as nats.Connect
// takes a list of servers.
func (c *NATSClusterServer) URL() string {
	urls := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		urls[i] = s.URL()
	}
	return strings.Join(urls, ",")
}

// Named returns the server whose server_name is name (a stream's leader,
// as JetStream's StreamInfo.Cluster.Leader names it), or nil.
func (c *NATSClusterServer) Named(name string) *NATSServer {
	if i := slices.Index(c.names, name); i >= 0 {
		return c.Servers[i]
	}
	return nil
}

// NATSCluster starts n nats-servers with JetStream as one cluster (client
// and route ports free on loopback) and waits until each answers a
// JetStream API request, which needs the cluster's JetStream meta leader
// elected, and until a stream of n replicas can be placed, which needs
// every server in the meta group. It takes no credentials.
func NATSCluster(t testing.TB, n int, opts ...Option) *NATSClusterServer {
	t.Helper()
	if n < 1 {
		t.Fatalf("testserver: NATSCluster needs at least 1 server, got %d", n)
	}
	bin := Require(t, "nats-server")
	o := collect(opts)
	o.check(t, "a NATS cluster", credentials{net: true, clock: true})
	if o.net != nil && o.net.Len() < n {
		t.Fatalf("testserver: NATSCluster of %d servers on a net of %d hosts", n, o.net.Len())
	}
	version, err := natsServerVersion(bin)
	if err != nil {
		t.Fatalf("testserver: %v", err)
	}
	bin = natsOnClock(t, bin, version, o.clock)
	base := dataDir(t, "nats-cluster")
	c := &NATSClusterServer{}
	startRetrying(t, fmt.Sprintf("NATS cluster of %d", n), func() error {
		clientPorts := make([]int, n)
		routes := make([]string, n)
		routePorts := make([]int, n)
		for i := range n {
			cp, err := freePort(0)
			if err != nil {
				return err
			}
			rp, err := freePort(0)
			if err != nil {
				return err
			}
			clientPorts[i], routePorts[i] = cp, rp
			routes[i] = "nats://" + net.JoinHostPort(memberIP(o.net, i), strconv.Itoa(rp))
		}
		// A name of its own, so that servers of another test's cluster
		// that reach these ports cannot join it.
		cluster := fmt.Sprintf("fence-test-%x", rand.Uint64())
		c.Servers = make([]*NATSServer, n)
		c.names = make([]string, n)
		for i := range n {
			name := fmt.Sprintf("n%d", i)
			dir := filepath.Join(base, name)
			if err := os.RemoveAll(dir); err != nil { // a failed attempt's state
				return err
			}
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			addr := net.JoinHostPort(memberIP(o.net, i), strconv.Itoa(clientPorts[i]))
			args := slices.Concat([]string{
				"-js", "-a", memberIP(o.net, i), "-p", strconv.Itoa(clientPorts[i]), "-sd", dir,
				"--server_name", name,
				"--cluster_name", cluster,
				"--cluster", routes[i],
				"--routes", strings.Join(slices.Delete(slices.Clone(routes), i, i+1), ","),
			}, o.args)
			c.names[i] = name
			c.Servers[i] = &NATSServer{version: version}
			c.Servers[i].Process = newProcess(t, procSpec{
				name: "nats-server-" + name,
				path: bin,
				args: args,
				env:  o.clock.env(),
				dir:  dir,
				port: clientPorts[i],
				net:  o.net,
				host: i,
				ping: func(ctx context.Context) error { return natsPing(ctx, addr) },
			})
		}
		// Start the servers together: JetStream answers only once a
		// quorum has elected its meta leader.
		ps := make([]*Process, n)
		for i, s := range c.Servers {
			ps[i] = s.Process
		}
		if err := startTogether(ps); err != nil {
			return err
		}
		return natsAwaitPlacement(c.Servers[0].Addr(), n)
	})
	return c
}

// natsAwaitPlacement waits until the cluster whose server answers at addr
// can place a stream of n replicas: the meta leader answers JetStream API
// requests before every server has joined its group, and a stream of
// more replicas than have joined is refused with "no suitable peers for
// placement". It creates a small stream of n replicas in memory, and
// deletes it again.
func natsAwaitPlacement(addr string, n int) error {
	name := fmt.Sprintf("fence_ready_%x", rand.Uint64())
	cfg := fmt.Sprintf(`{"name":%q,"subjects":[%q],"num_replicas":%d,"storage":"memory"}`, name, "fence.ready."+name, n)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		reply, err := natsRequest(ctx, addr, "$JS.API.STREAM.CREATE."+name, cfg)
		cancel()
		switch {
		case err == nil && !strings.Contains(reply, `"error"`):
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			reply, err = natsRequest(ctx, addr, "$JS.API.STREAM.DELETE."+name, "")
			if err == nil && strings.Contains(reply, `"error"`) {
				err = fmt.Errorf("nats: JetStream: %s", reply)
			}
			if err != nil {
				return fmt.Errorf("deleting the stream that showed %d replicas can be placed: %w", n, err)
			}
			return nil
		case err == nil && !strings.Contains(reply, "no suitable peers"):
			return fmt.Errorf("nats: JetStream: creating a stream of %d replicas: %s", n, reply)
		case time.Now().After(deadline):
			return fmt.Errorf("nats: a stream of %d replicas cannot be placed after 30 s: %v %s", n, err, reply)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// ReplaceEmpty brings server i back without its JetStream store (-sd),
// under its old name, as an operator replaces a server whose disk was
// lost: the others, a quorum, keep the streams, and the server takes its
// replicas back from their leaders. Unlike Restart it returns its error,
// so any goroutine may call it.
func (c *NATSClusterServer) ReplaceEmpty(i int) error {
	if i < 0 || i >= len(c.Servers) || len(c.Servers) < 3 {
		return fmt.Errorf("testserver: ReplaceEmpty(%d) of a cluster of %d (needs 3 servers at least)", i, len(c.Servers))
	}
	s := c.Servers[i]
	s.Kill()
	if err := clearDir(s.dir); err != nil {
		return err
	}
	return s.start()
}
