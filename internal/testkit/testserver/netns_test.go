package testserver

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestNetPartition starts an etcd cluster on test hosts and cuts one member
// from its peers: the test still reaches it, but it can no longer serve a
// write (no quorum), while the other two can; healed, it catches up. A
// Partition that cut nothing would let the isolated member's write through.
func TestNetPartition(t *testing.T) {
	t.Parallel()
	n := NewNet(t, 3)
	c := timed(t, "etcd cluster of 3 on test hosts", func() *EtcdClusterServer { return EtcdCluster(t, 3, OnNet(n)) })
	for i, m := range c.Members {
		if host, _, _ := net.SplitHostPort(m.Addr()); host != n.IP(i) {
			t.Fatalf("member %d listens on %s, want host %s", i, m.Addr(), n.IP(i))
		}
	}
	ctx := testContext(t)
	if err := etcdPut(ctx, c.Members[0].Endpoint(), "fence/k", "v1"); err != nil {
		t.Fatal(err)
	}
	if err := n.Isolate(0); err != nil {
		t.Fatal(err)
	}
	if got := n.Cut(); len(got) != 2 {
		t.Fatalf("Cut() = %v after isolating host 0 of 3, want its 2 links", got)
	}
	// The majority elects a leader (if it lost it) and takes writes.
	eventually(t, 30*time.Second, "put on the majority", func() error {
		return etcdPut(ctx, c.Members[1].Endpoint(), "fence/k", "v2")
	})
	// The isolated member answers its client but commits nothing.
	short, cancel := context.WithTimeout(ctx, 3*time.Second)
	err := etcdPut(short, c.Members[0].Endpoint(), "fence/k", "isolated")
	cancel()
	if err == nil {
		t.Fatalf("a put on the isolated member succeeded: the partition cut nothing")
	}
	t.Logf("put on the isolated member: %v", err)
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	if got := n.Cut(); len(got) != 0 {
		t.Fatalf("Cut() = %v after Heal", got)
	}
	// The put on the isolated member timed out, so its outcome is
	// unknown: the cut drops packets without closing connections, and a
	// proposal the member had sent its peers before they noticed may be
	// delivered, and committed over v2, once the cut heals. Either way
	// the healed member must read what the majority reads.
	eventually(t, 30*time.Second, "the healed member catches up", func() error {
		v0, err := etcdGet(ctx, c.Members[0].Endpoint(), "fence/k")
		if err != nil {
			return fmt.Errorf("healed member: %w", err)
		}
		v1, err := etcdGet(ctx, c.Members[1].Endpoint(), "fence/k")
		switch {
		case err != nil:
			return fmt.Errorf("majority member: %w", err)
		case v0 != v1:
			return fmt.Errorf("healed member reads %q, the majority %q", v0, v1)
		case v0 != "v2" && v0 != "isolated":
			return fmt.Errorf("got %q, want v2 (or isolated, if the timed-out put was committed after all)", v0)
		}
		t.Logf("after the heal, both read %q", v0)
		return nil
	})
}

// TestNetRemoved checks that a Net leaves no namespace or bridge behind.
func TestNetRemoved(t *testing.T) {
	t.Parallel()
	var id string
	t.Run("net", func(t *testing.T) {
		n := NewNet(t, 2)
		id = n.id
	})
	if id == "" {
		return // skipped: no namespaces here
	}
	out, err := exec.Command(Require(t, "ip"), "netns", "list").Output()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(out), id) {
		t.Errorf("namespaces of a finished Net remain:\n%s", out)
	}
	if err := exec.Command("ip", "link", "show", "fnb"+id).Run(); err == nil {
		t.Errorf("the bridge of a finished Net remains")
	}
}

// TestSentinelPartition cuts the master's host (the master and a
// Sentinel) from the others: the master goes on taking writes from its
// clients while the majority's Sentinels promote a replica; healed, the
// old master becomes the new one's replica and drops what it took. A cut
// that did not bite would leave the Sentinels naming the old master.
func TestSentinelPartition(t *testing.T) {
	t.Parallel()
	n := NewNet(t, 3)
	s := timed(t, "redis sentinel of 3 data servers and 3 sentinels on test hosts", func() *RedisSentinelServer { return RedisSentinel(t, 2, 3, OnNet(n)) })
	for i, p := range []*Process{s.Nodes[0].Process, s.Nodes[1].Process, s.Nodes[2].Process} {
		if host, _, _ := net.SplitHostPort(p.Addr()); host != n.IP(i) || host != hostOf(s.Sentinels[i].Addr()) {
			t.Fatalf("data server %d on %s, sentinel on %s, want host %s", i, p.Addr(), s.Sentinels[i].Addr(), n.IP(i))
		}
	}
	ctx := testContext(t)
	old := s.Master()
	if old != s.Nodes[0] {
		t.Fatalf("master %s, want data server 0", old.Addr())
	}
	if err := n.Isolate(0); err != nil {
		t.Fatal(err)
	}
	var promoted *RedisServer
	eventually(t, 30*time.Second, "the majority promotes a replica", func() error {
		m, err := s.MajorityMaster(ctx)
		switch {
		case err != nil:
			return err
		case m == old:
			return fmt.Errorf("the majority still names %s", m.Addr())
		}
		role, err := m.role(ctx)
		if err != nil || role[0] != "master" {
			return fmt.Errorf("%s: ROLE %v, %v", m.Addr(), role, err)
		}
		promoted = m
		return nil
	})
	if a, err := s.Sentinels[0].master(ctx); err != nil || a != old.Addr() {
		t.Fatalf("the cut-off sentinel names %q, %v; want the old master %s", a, err, old.Addr())
	}
	// Both take writes: two masters.
	for _, m := range []*RedisServer{old, promoted} {
		if v, err := m.do(ctx, "SET", "side", m.Addr()); err != nil || v != "OK" {
			t.Fatalf("SET on %s = %v, %v", m.Addr(), v, err)
		}
	}
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	s.WaitReady()
	if m := s.Master(); m != promoted {
		t.Fatalf("after the heal the Sentinels name %s, want %s", m.Addr(), promoted.Addr())
	}
	eventually(t, 30*time.Second, "the old master copies the new one", func() error {
		v, err := old.do(ctx, "GET", "side")
		if err != nil || v != promoted.Addr() {
			return fmt.Errorf("GET side on the old master = %v, %v; want %s", v, err, promoted.Addr())
		}
		return nil
	})
}

// TestRedisClusterPartition cuts a master of a Redis Cluster from every
// other node: after cluster-node-timeout it refuses commands, and the
// majority promotes its replica; healed, it rejoins as that replica's
// replica.
func TestRedisClusterPartition(t *testing.T) {
	t.Parallel()
	n := NewNet(t, 6)
	c := timed(t, "redis cluster of 3 masters and 3 replicas on test hosts", func() *RedisClusterServer { return RedisClusterReplicas(t, 3, 1, OnNet(n)) })
	for i, nd := range c.Nodes {
		if hostOf(nd.Addr()) != n.IP(i) {
			t.Fatalf("node %d on %s, want host %s", i, nd.Addr(), n.IP(i))
		}
	}
	ctx := testContext(t)
	old := c.Masters()[0]
	replicas := c.ReplicasOf(old)
	cut := slices.Index(c.Nodes, old)
	if len(replicas) != 1 || cut < 0 {
		t.Fatalf("master %s has replicas %v", old.Addr(), replicas)
	}
	if err := n.Isolate(cut); err != nil {
		t.Fatal(err)
	}
	promoted := c.WaitFailover(old, replicas)
	eventually(t, 10*time.Second, "the cut-off master refuses", func() error {
		v, err := old.do(ctx, "CLUSTER", "INFO")
		if info, _ := v.(string); err != nil || !strings.Contains(info, "cluster_state:fail") {
			return fmt.Errorf("CLUSTER INFO on the cut-off master: %v, %v", v, err)
		}
		return nil
	})
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	c.WaitReady()
	if r := c.ReplicasOf(promoted); len(r) != 1 || r[0] != old {
		t.Fatalf("after the heal %s has replicas %v, want the old master %s", promoted.Addr(), r, old.Addr())
	}
}

func hostOf(addr string) string {
	h, _, _ := net.SplitHostPort(addr)
	return h
}

// TestPostgresPairPartition cuts a synchronous pair's primary from its
// standby on test hosts: the test still reaches both, but the primary's
// commits wait; healed, the standby streams again and the waiting commit
// returns. A cut that cut nothing would let the commit through.
func TestPostgresPairPartition(t *testing.T) {
	t.Parallel()
	n := NewNet(t, 2)
	pr := timed(t, "postgres pair on test hosts", func() *PostgresPairServer { return PostgresPair(t, Synchronous, OnNet(n)) })
	for i, nd := range pr.Nodes {
		if hostOf(nd.Addr()) != n.IP(i) {
			t.Fatalf("node %d on %s, want host %s", i, nd.Addr(), n.IP(i))
		}
	}
	primary := pr.Primary()
	mustQuery(t, primary.Addr(), "CREATE TABLE t (x int)")
	if err := n.Isolate(0); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := pgQuery(testContext(t), primary.Addr(), "test", "INSERT INTO t VALUES (1)")
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("a commit returned (%v) with the synchronous standby cut off", err)
	case <-time.After(2 * time.Second):
	}
	if in, err := pr.InRecovery(testContext(t), pr.Standby()); err != nil || !in {
		t.Fatalf("the cut-off standby: in recovery %v, %v; want true (the test reaches it)", in, err)
	}
	if err := n.Heal(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the waiting commit after the heal: %v", err)
	}
	if err := pr.WaitStreaming(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the standby has the row", func() error {
		rows, err := pgQuery(testContext(t), pr.Standby().Addr(), "test", "SELECT count(*) FROM t")
		if err != nil || len(rows) != 1 || rows[0][0] != "1" {
			return fmt.Errorf("SELECT count(*) on the standby = %q, %v; want 1", rows, err)
		}
		return nil
	})
}
