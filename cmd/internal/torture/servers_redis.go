package torture

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence/internal/testkit/testserver"
)

// Redis deployments whose restart fault is a failover: a master killed, a
// replica promoted in its place, the killed master back as a replica.
// Redis replicates asynchronously, so a master may die with a lease it
// acknowledged and never sent on: the kill of a master is marked as a
// possible loss of the store's state (Store.failover), and only the
// overlaps such a loss explains are allowed (crashOverlap).

func init() {
	server := func(name, scheme, about string, open func(env *testserver.Env) (*Store, error)) {
		// cluster: the no-guard proof runs on it (proofStores).
		kinds[name] = kind{about: about, scheme: scheme, open: open, cluster: true}
	}
	server("redis-sentinel", "redis+sentinel", "a private Redis master with two replicas watched by three Sentinels, a data server and a Sentinel on each of three test hosts (the restart fault kills the master, which the Sentinels fail over, then a replica, in turn; the partition fault cuts the master's host, then a replica's, from the others)", openRedisSentinel)
	server("redis-cluster-failover", "redis+cluster", "a private Redis Cluster of three masters with a replica each, each node on a test host of its own (the restart fault kills the master that holds a lease, whose replica is promoted, then a replica, in turn; the partition fault cuts that master, then its replica, from the others)", openRedisClusterFailover)
}

// A failover episode is the master's death noticed (SentinelDownAfter,
// RedisClusterFailoverTimeout), a replica elected and promoted, and the
// killed master started again and turned into a replica (by the
// Sentinels, on their periods); docs/reliability.md has the times.
const (
	sentinelFailoverFor = 12 * time.Second
	clusterFailoverFor  = 8 * time.Second
)

func openRedisSentinel(env *testserver.Env) (*Store, error) {
	nt, why, err := onNet(env, 3)
	if err != nil {
		return nil, err
	}
	var srv *testserver.RedisSentinelServer
	// The clock-jump fault moves the data servers' clock, not the
	// Sentinels'.
	clock, clockNA := fakeClock(env)
	opts := append(netOpts(nt), clockOpts(clock)...)
	if err := env.Do(func(tb testing.TB) { srv = testserver.RedisSentinel(tb, 2, 3, opts...) }); err != nil {
		return nil, err
	}
	s, err := sentinelStore(env, srv)
	if err != nil {
		return nil, err
	}
	s.clock, s.clockNA = oneClock(clock), clockNA
	s.setPartition(nt, why, func() partitionFunc { return partitionMaster(nt, sentinelCut(env, srv)) }, sentinelFailoverFor)
	return s, nil
}

// sentinelCut is how the partition fault cuts srv: data server i and
// Sentinel i share host i. The cut-off master goes on taking writes
// (no min-replicas-to-write) until, after the heal, the Sentinels make it
// a replica of the one the majority promoted.
func sentinelCut(env *testserver.Env, srv *testserver.RedisSentinelServer) masterCut {
	index := func(n *testserver.RedisServer) (int, error) {
		if i := slices.Index(srv.Nodes, n); i >= 0 {
			return i, nil
		}
		return 0, fmt.Errorf("redis sentinel: %s is none of the data servers", n.Addr())
	}
	turn := 0
	return masterCut{
		what:  "redis master",
		names: redisAddrs(srv.Nodes),
		master: func() (int, error) {
			var m *testserver.RedisServer
			if err := env.Do(func(testing.TB) { m = srv.Master() }); err != nil {
				return 0, err
			}
			return index(m)
		},
		replica: func(m int) (int, error) {
			turn++
			return (m + 1 + turn%2) % len(srv.Nodes), nil
		},
		promoted: func(old int) (int, error) {
			return awaitLeader(func() (int, error) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				m, err := srv.MajorityMaster(ctx)
				switch {
				case err != nil:
					return 0, err
				case m == srv.Nodes[old]:
					return 0, fmt.Errorf("a majority of the Sentinels still names %s", m.Addr())
				}
				return index(m)
			})
		},
		ready:          func() error { return env.Do(func(testing.TB) { srv.WaitReady() }) },
		alone:          func(i int) error { return redisAlone(srv.Nodes[i]) },
		minorityWrites: true,
	}
}

func redisAddrs(ns []*testserver.RedisServer) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = n.Addr()
	}
	return out
}

// sentinelStore is the redis-sentinel store on srv.
func sentinelStore(env *testserver.Env, srv *testserver.RedisSentinelServer) (*Store, error) {
	u := "redis+sentinel://" + strings.Join(srv.SentinelAddrs(), ",") + "/" + srv.MasterName()
	master := func() (m *testserver.RedisServer, err error) {
		err = env.Do(func(testing.TB) { m = srv.Master() })
		return m, err
	}
	n := 0
	s := &Store{
		url: func([]string, time.Duration) string { return u },
		// The client asks the Sentinels for the master's address and
		// connects to it directly.
		unproxied: "a Sentinel client connects to the master the Sentinels announce, not through a proxy",
		failover: func(down time.Duration, started, lost func(string)) (string, error) {
			m, err := master()
			if err != nil {
				return "", err
			}
			n++
			if n%2 == 1 {
				return sentinelFailover(env, srv, m, lost)
			}
			var r *testserver.RedisServer
			if err := env.Do(func(testing.TB) { r = srv.Replicas()[n/2%2] }); err != nil {
				return "", err
			}
			return restartReplica(env, "redis replica "+r.Addr(), r, down, started, srv.WaitReady)
		},
		restartFor: sentinelFailoverFor,
		// Measured: the next grant 2.4 s to 3.5 s after a master's kill.
		grantWithin: 8 * time.Second,
		wipe: func(ctx context.Context) (string, error) {
			m, err := master()
			if err != nil {
				return "", err
			}
			return wipeRedis(m.Addr())(ctx) // the replicas copy it
		},
		emptyAtOnce: func(lost func(string)) (string, error) {
			m, err := master()
			if err != nil {
				return "", err
			}
			return restartAtOnce(env, "redis master "+m.Addr(), m, lost, srv.WaitReady)
		},
	}
	return s, s.atOnceTTL(env, srv.Nodes[len(srv.Nodes)-1], srv.WaitReady)
}

// sentinelFailover kills the master m, waits until the Sentinels have
// promoted a replica, then starts m again and waits until it is that
// replica's replica.
func sentinelFailover(env *testserver.Env, srv *testserver.RedisSentinelServer, m *testserver.RedisServer, lost func(string)) (string, error) {
	m.Kill()
	killed := time.Now()
	lost(fmt.Sprintf("kill redis master %s (SIGKILL): what it acknowledged and its replicas lack is lost", m.Addr()))
	var promoted *testserver.RedisServer
	if err := env.Do(func(testing.TB) { promoted = srv.WaitFailover(m) }); err != nil {
		return "", err
	}
	after := time.Since(killed)
	if err := env.Do(func(testing.TB) { m.Restart(); srv.WaitReady() }); err != nil {
		return "", err
	}
	return fmt.Sprintf("the Sentinels promoted %s %v after the kill; %s back as a replica %v after it",
		promoted.Addr(), after.Round(10*time.Millisecond), m.Addr(), time.Since(killed).Round(10*time.Millisecond)), nil
}

// restartAtOnce kills the master m and starts it again at once: no
// persistence, so it comes back with no data, and sooner than the
// Sentinels or the Cluster would fail it over, so it is still the master,
// and its replicas copy its empty dataset. Every lease it held is lost,
// and its holders believe in it until their next renewal.
func restartAtOnce(env *testserver.Env, name string, m *testserver.RedisServer, lost func(string), ready func()) (string, error) {
	m.Kill()
	lost(fmt.Sprintf("kill %s (SIGKILL) and start it again at once: it comes back empty", name))
	start := time.Now()
	if err := env.Do(func(testing.TB) { m.Restart() }); err != nil {
		return "", err
	}
	back := time.Since(start)
	if err := env.Do(func(testing.TB) { ready() }); err != nil {
		return "", err
	}
	return fmt.Sprintf("back empty after %v, its replicas in sync with it after %v",
		back.Round(10*time.Millisecond), time.Since(start).Round(10*time.Millisecond)), nil
}

// atOnceTTL sets the store up, and its restart-empty plans' TTL from the
// time replica r (a server like the masters) takes to start again:
// holders' leases must outlast a master's restart.
func (s *Store) atOnceTTL(env *testserver.Env, r *testserver.RedisServer, ready func()) error {
	if err := s.setUp(); err != nil {
		return err
	}
	start := time.Now()
	if err := env.Do(func(testing.TB) { r.Restart() }); err != nil {
		return err
	}
	s.emptyTTL = min(maxEmptyTTL, (3 * time.Since(start)).Round(100*time.Millisecond))
	return env.Do(func(testing.TB) { ready() })
}

// restartReplica kills a replica, keeps it down for down, starts it again
// (empty: it copies its master's data) and waits until ready says the
// setup is whole again. A replica's death loses nothing a master
// acknowledged.
func restartReplica(env *testserver.Env, name string, r *testserver.RedisServer, down time.Duration, started func(string), ready func()) (string, error) {
	r.Kill()
	started(fmt.Sprintf("kill %s (SIGKILL), down for %v", name, down))
	time.Sleep(down)
	start := time.Now()
	if err := env.Do(func(testing.TB) { r.Restart(); ready() }); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s back and in sync after %v", name, time.Since(start).Round(10*time.Millisecond)), nil
}

func openRedisClusterFailover(env *testserver.Env) (*Store, error) {
	nt, why, err := onNet(env, 6)
	if err != nil {
		return nil, err
	}
	var c *testserver.RedisClusterServer
	clock, clockNA := fakeClock(env)
	opts := append(netOpts(nt), clockOpts(clock)...)
	if err := env.Do(func(tb testing.TB) { c = testserver.RedisClusterReplicas(tb, 3, 1, opts...) }); err != nil {
		return nil, err
	}
	seeds := "redis+cluster://" + strings.Join(c.Addrs(), ",")
	masters := func() (ms []*testserver.RedisServer, err error) {
		err = env.Do(func(testing.TB) { ms = c.Masters() })
		return ms, err
	}
	n := 0
	s := &Store{
		clock:     oneClock(clock),
		clockNA:   clockNA,
		url:       func([]string, time.Duration) string { return seeds },
		unproxied: "a Cluster client connects to the addresses the masters announce, not through a proxy",
		failover: func(down time.Duration, started, lost func(string)) (string, error) {
			ms, err := masters()
			if err != nil {
				return "", err
			}
			m, which, err := leaseMaster(ms, n/2)
			if err != nil {
				return "", err
			}
			var rs []*testserver.RedisServer
			if err := env.Do(func(testing.TB) { rs = c.ReplicasOf(m) }); err != nil {
				return "", err
			}
			if len(rs) == 0 {
				return "", fmt.Errorf("redis cluster master %s has no replica", m.Addr())
			}
			n++
			if n%2 == 1 {
				return clusterFailover(env, c, m, which, rs, lost)
			}
			return restartReplica(env, "redis cluster replica "+rs[0].Addr(), rs[0], down, started, c.WaitReady)
		},
		restartFor: clusterFailoverFor,
		// Measured: the next grant 3.3 s to 4.2 s after a master's kill.
		grantWithin: 8 * time.Second,
		wipe: func(ctx context.Context) (string, error) {
			ms, err := masters()
			if err != nil {
				return "", err
			}
			var addrs []string
			for _, m := range ms {
				addrs = append(addrs, m.Addr())
			}
			return wipeRedis(addrs...)(ctx) // each master's replica copies it
		},
		emptyAtOnce: func(lost func(string)) (string, error) {
			ms, err := masters()
			if err != nil {
				return "", err
			}
			m, which, err := leaseMaster(ms, 0)
			if err != nil {
				return "", err
			}
			return restartAtOnce(env, "redis cluster master "+m.Addr()+" ("+which+")", m, lost, c.WaitReady)
		},
	}
	s.setPartition(nt, why, func() partitionFunc { return partitionMaster(nt, clusterCut(env, c, masters)) }, clusterFailoverFor)
	var r *testserver.RedisServer
	if err := env.Do(func(testing.TB) { r = c.ReplicasOf(c.Masters()[0])[0] }); err != nil {
		return nil, err
	}
	return s, s.atOnceTTL(env, r, c.WaitReady)
}

// clusterCut is how the partition fault cuts c: node i on host i. The
// cut-off master refuses commands (CLUSTERDOWN) once it has missed the
// other masters for cluster-node-timeout, about when they promote its
// replica.
func clusterCut(env *testserver.Env, c *testserver.RedisClusterServer, masters func() ([]*testserver.RedisServer, error)) masterCut {
	index := func(n *testserver.RedisServer) int { return slices.Index(c.Nodes, n) }
	turn := 0
	replicasOf := func(m int) (rs []*testserver.RedisServer, err error) {
		err = env.Do(func(testing.TB) { rs = c.ReplicasOf(c.Nodes[m]) })
		if err == nil && len(rs) == 0 {
			err = fmt.Errorf("redis cluster master %s has no replica", c.Nodes[m].Addr())
		}
		return rs, err
	}
	var cutReplicas []*testserver.RedisServer // the cut master's, before the cut
	return masterCut{
		what:  "redis cluster master",
		names: c.Addrs(),
		master: func() (int, error) {
			ms, err := masters()
			if err != nil {
				return 0, err
			}
			m, _, err := leaseMaster(ms, turn)
			if err != nil {
				return 0, err
			}
			turn++
			if cutReplicas, err = replicasOf(index(m)); err != nil {
				return 0, err
			}
			return index(m), nil
		},
		replica: func(m int) (int, error) {
			rs, err := replicasOf(m)
			if err != nil {
				return 0, err
			}
			return index(rs[0]), nil
		},
		promoted: func(old int) (int, error) {
			var p *testserver.RedisServer
			err := env.Do(func(testing.TB) { p = c.WaitFailover(c.Nodes[old], cutReplicas) })
			return index(p), err
		},
		ready: func() error { return env.Do(func(testing.TB) { c.WaitReady() }) },
		alone: func(i int) error { return redisAlone(c.Nodes[i]) },
	}
}

// redisAlone says whether the replica n has lost its master: nil if its
// replication link is down.
func redisAlone(n *testserver.RedisServer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: n.Addr()})
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	switch {
	case err != nil:
		return err
	case strings.Contains(info, "master_link_status:down"):
		return nil
	}
	return fmt.Errorf("its replication link is up")
}

// clusterFailover kills the master m, waits until one of its replicas rs
// is promoted in its place, then starts m again and waits until it has
// rejoined as a replica.
func clusterFailover(env *testserver.Env, c *testserver.RedisClusterServer, m *testserver.RedisServer, which string, rs []*testserver.RedisServer, lost func(string)) (string, error) {
	m.Kill()
	killed := time.Now()
	lost(fmt.Sprintf("kill redis cluster master %s (%s) (SIGKILL): what it acknowledged and its replica lacks is lost", m.Addr(), which))
	var promoted *testserver.RedisServer
	if err := env.Do(func(testing.TB) { promoted = c.WaitFailover(m, rs) }); err != nil {
		return "", err
	}
	after := time.Since(killed)
	if err := env.Do(func(testing.TB) { m.Restart(); c.WaitReady() }); err != nil {
		return "", err
	}
	return fmt.Sprintf("the cluster promoted %s %v after the kill; %s back as a replica %v after it",
		promoted.Addr(), after.Round(10*time.Millisecond), m.Addr(), time.Since(killed).Round(10*time.Millisecond)), nil
}

// leaseMaster returns the master of ms that holds a lease of the plan's
// (a torture key's lock: fence:{torture/...}), so that the kill hits the
// lease; if none holds one at this moment, ms[turn%len(ms)]. which says
// which of the two it is.
func leaseMaster(ms []*testserver.RedisServer, turn int) (m *testserver.RedisServer, which string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, m := range ms {
		held, err := holdsLease(ctx, m.Addr())
		if err != nil {
			return nil, "", fmt.Errorf("redis cluster master %s: %w", m.Addr(), err)
		}
		if held {
			return m, "it holds the plan's lease", nil
		}
	}
	if len(ms) == 0 {
		return nil, "", fmt.Errorf("the redis cluster has no master")
	}
	return ms[turn%len(ms)], "no lease held at the moment: one in turn", nil
}

// holdsLease reports whether the server at addr holds a torture key's lock.
func holdsLease(ctx context.Context, addr string) (bool, error) {
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	var cursor uint64
	for {
		// Lock names end in the key's closing brace; the token counters
		// and release channels do not.
		keys, next, err := c.Scan(ctx, cursor, "fence:{torture/*}", 1000).Result()
		if err != nil || len(keys) > 0 {
			return len(keys) > 0, err
		}
		if cursor = next; cursor == 0 {
			return false, nil
		}
	}
}
