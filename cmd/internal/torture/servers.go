package torture

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence/cmd/internal/storeurl"
	"github.com/fencing/fence/fencenats"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// Stores on private servers that the tool starts through internal/testkit/testserver
// (and kills at the end). Each needs its driver's URL scheme registered in
// cmd/internal/storeurl; kinds whose driver is not built in say so.

func init() {
	server := func(name, scheme, about string, open func(env *testserver.Env) (*Store, error)) {
		kinds[name] = kind{about: about, scheme: scheme, open: open}
	}
	sessionBound := func(name string) {
		k := kinds[name]
		k.sessionBound = true
		kinds[name] = k
	}
	cluster := func(name string) {
		k := kinds[name]
		k.cluster = true
		kinds[name] = k
	}
	defer cluster("etcd-cluster")
	defer cluster("zk-ensemble")
	defer cluster("nats-cluster")
	defer cluster("redis-cluster")
	defer sessionBound("postgres-session")
	defer sessionBound("mysql")
	server("redis", "redis", "a private redis-server (no persistence: a restart loses every lease)", func(env *testserver.Env) (*Store, error) {
		var srv *testserver.RedisServer
		clock, clockNA := fakeClock(env)
		if err := env.Do(func(tb testing.TB) { srv = testserver.Redis(tb, clockOpts(clock)...) }); err != nil {
			return nil, err
		}
		s := &Store{
			clock:   oneClock(clock),
			clockNA: clockNA,
			addrs:   []string{srv.Addr()},
			url:     func(a []string, _ time.Duration) string { return "redis://" + a[0] },
			restart: restartProcess(env, "redis-server", srv.Process),
			wipe:    wipeRedis(srv.Addr()),
		}
		return s, s.saveEmpty("redis-server", srv.Process)
	})
	server("redlock", "redlock", "Redlock over three private redis-servers (the restart fault restarts one)", func(env *testserver.Env) (*Store, error) {
		// A clock per server: the clock-jump fault moves all three, then
		// each one alone, in turn.
		srvs := make([]*testserver.RedisServer, 3)
		clocks := make([]*testserver.FakeClock, 3)
		var clockNA string
		var addrs []string
		for i := range srvs {
			clocks[i], clockNA = fakeClock(env)
			if err := env.Do(func(tb testing.TB) { srvs[i] = testserver.Redis(tb, clockOpts(clocks[i])...) }); err != nil {
				return nil, err
			}
			addrs = append(addrs, srvs[i].Addr())
		}
		s := &Store{
			clock:   memberClocks(clocks, addrs),
			clockNA: clockNA,
			addrs:   addrs,
			url:     func(a []string, _ time.Duration) string { return "redlock://" + strings.Join(a, ",") },
			restart: restartOneOf(env, "redis-server", srvs[0].Process, srvs[1].Process, srvs[2].Process),
			wipe:    wipeRedisOneOf(addrs...),
		}
		return s, s.saveEmptyOne("redis-server", srvs[0].Process, srvs[1].Process, srvs[2].Process)
	})
	server("redis-cluster", "redis+cluster", "a private three-master Redis Cluster (the restart fault restarts one master)", func(env *testserver.Env) (*Store, error) {
		var c *testserver.RedisClusterServer
		clock, clockNA := fakeClock(env)
		if err := env.Do(func(tb testing.TB) { c = testserver.RedisCluster(tb, 3, clockOpts(clock)...) }); err != nil {
			return nil, err
		}
		seeds := "redis+cluster://" + strings.Join(c.Addrs(), ",")
		var ps []*testserver.Process
		for _, n := range c.Nodes {
			ps = append(ps, n.Process)
		}
		s := &Store{
			clock:   oneClock(clock),
			clockNA: clockNA,
			url:     func([]string, time.Duration) string { return seeds },
			// The client learns the masters' own addresses from the
			// cluster and connects to them directly.
			unproxied: "a Cluster client connects to the addresses the masters announce, not through a proxy",
			restart:   restartOneOf(env, "redis-server", ps...),
			wipe:      wipeRedis(c.Addrs()...),
		}
		return s, s.saveEmptyOne("redis-server", ps...)
	})
	pg := func(query string) func(env *testserver.Env) (*Store, error) {
		return func(env *testserver.Env) (*Store, error) {
			var srv *testserver.PostgresServer
			clock, clockNA := fakeClock(env)
			if err := env.Do(func(tb testing.TB) { srv = testserver.Postgres(tb, clockOpts(clock)...) }); err != nil {
				return nil, err
			}
			s := &Store{
				clock:   oneClock(clock),
				clockNA: clockNA,
				addrs:   []string{srv.Addr()},
				url: func(a []string, _ time.Duration) string {
					return fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable%s", a[0], srv.Database(), query)
				},
				restart: restartProcess(env, "postgres", srv.Process),
				wipe:    wipePostgres(fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", srv.Addr(), srv.Database())),
			}
			return s, s.saveEmpty("postgres", srv.Process)
		}
	}
	server("postgres", "postgres", "a private PostgreSQL, lease mode (a row per key)", pg(""))
	server("postgres-session", "postgres", "a private PostgreSQL, session mode (advisory lock on a dedicated connection)", pg("&mode=session"))
	server("mysql", "mysql", "a private MariaDB (GET_LOCK on a dedicated connection)", func(env *testserver.Env) (*Store, error) {
		var srv *testserver.MariaDBServer
		clock, clockNA := fakeClock(env)
		if err := env.Do(func(tb testing.TB) { srv = testserver.MariaDB(tb, clockOpts(clock)...) }); err != nil {
			return nil, err
		}
		s := &Store{
			clock:   oneClock(clock),
			clockNA: clockNA,
			addrs:   []string{srv.Addr()},
			url: func(a []string, _ time.Duration) string {
				return fmt.Sprintf("mysql://root@%s/%s", a[0], srv.Database())
			},
			restart: restartProcess(env, "mariadbd", srv.Process),
			wipe:    wipeMySQL(fmt.Sprintf("root@tcp(%s)/%s", srv.Addr(), srv.Database())),
		}
		return s, s.saveEmpty("mariadbd", srv.Process)
	})
	server("etcd", "etcd", "a private single-member etcd", func(env *testserver.Env) (*Store, error) {
		var srv *testserver.EtcdServer
		if err := env.Do(func(tb testing.TB) { srv = testserver.Etcd(tb) }); err != nil {
			return nil, err
		}
		s := &Store{
			addrs:   []string{srv.Addr()},
			url:     func(a []string, _ time.Duration) string { return "etcd://" + a[0] },
			restart: restartProcess(env, "etcd", srv.Process),
			wipe:    wipeEtcd(srv.Addr()),
			hold:    etcdHold,
			// A server that lost its data lost the token epoch too;
			// restoring it as set up would be a rollback to a snapshot,
			// whose revisions go back under the same epoch (docs/etcd.md).
			emptyBare: true,
		}
		return s, s.saveEmpty("etcd", srv.Process)
	})
	server("etcd-cluster", "etcd", "a private three-member etcd cluster, each member on a test host of its own (the restart fault kills the leader and a follower in turn; the partition fault cuts one from its peers)", func(env *testserver.Env) (*Store, error) {
		nt, why, err := onNet(env, 3)
		if err != nil {
			return nil, err
		}
		var c *testserver.EtcdClusterServer
		if err := env.Do(func(tb testing.TB) { c = testserver.EtcdCluster(tb, 3, netOpts(nt)...) }); err != nil {
			return nil, err
		}
		var addrs []string
		for _, m := range c.Members {
			addrs = append(addrs, m.Addr())
		}
		s := &Store{
			addrs:   addrs,
			url:     func(a []string, _ time.Duration) string { return "etcd://" + strings.Join(a, ",") },
			restart: restartMember(env, "etcd", etcdProcs(c), etcdNames(c), func() (int, error) { return etcdLeader(c) }),
			wipe:    wipeEtcd(addrs...),
			hold:    etcdHold,
			// A member that lost its data is removed from the cluster and
			// added again as a new member (testserver's ReplaceEmpty).
			emptyMember: emptyMember("etcd", etcdNames(c), func() (int, error) { return etcdLeader(c) }, c.ReplaceEmpty),
		}
		// A leader that hears no quorum for an election timeout (1 s)
		// steps down, and the others elect one in about as long.
		s.setNet(nt, why, etcdNames(c), func() (int, error) { return etcdLeader(c) }, func(i int) error { return etcdAlone(c, i) }, 3*time.Second)
		// The holder's lease ends at the new leader, which extends every
		// lease by an election timeout when it takes over, and raises a
		// TTL to at least 1.5 election timeouts (2 s): about 1-2 s of
		// election, then 3 s, then a watch and an acquisition. Measured
		// 3.1 s at most on a quiet machine after a kill or a cut (TTL
		// 500 ms), 6.3 s once under a loaded -race run.
		s.grantWithin = 8 * time.Second
		return s, nil
	})
	server("zk", "zk", "a private ZooKeeper", func(env *testserver.Env) (*Store, error) {
		var srv *testserver.ZooKeeperServer
		clock, clockNA := fakeClock(env)
		if err := env.Do(func(tb testing.TB) { srv = testserver.ZooKeeper(tb, clockOpts(clock)...) }); err != nil {
			return nil, err
		}
		s := &Store{
			clock:   oneClock(clock),
			clockNA: clockNA,
			addrs:   []string{srv.Addr()},
			url: func(a []string, ttl time.Duration) string {
				// The session must end with the lease: a paused holder's
				// session then expires like a TTL lease.
				return "zk://" + a[0] + "/fence?session_timeout=" + ttl.String()
			},
			// The server expires sessions on its tick (200 ms here).
			hold:      func(ttl time.Duration) time.Duration { return ttl + 400*time.Millisecond },
			restart:   restartProcess(env, "zookeeper", srv.Process),
			wipe:      wipeZK([]string{srv.Addr()}, "/fence"),
			emptyBare: true,
		}
		return s, s.saveEmpty("zookeeper", srv.Process)
	})
	server("zk-ensemble", "zk", "a private ZooKeeper ensemble of three, each server on a test host of its own (the restart fault kills the leader and a follower in turn; the partition fault cuts one from its peers)", func(env *testserver.Env) (*Store, error) {
		nt, why, err := onNet(env, 3)
		if err != nil {
			return nil, err
		}
		var e *testserver.ZooKeeperEnsembleServer
		clock, clockNA := fakeClock(env)
		if err := env.Do(func(tb testing.TB) {
			e = testserver.ZooKeeperEnsemble(tb, 3, append(netOpts(nt), clockOpts(clock)...)...)
		}); err != nil {
			return nil, err
		}
		s := &Store{
			clock:   oneClock(clock),
			clockNA: clockNA,
			addrs:   e.Addrs(),
			url: func(a []string, ttl time.Duration) string {
				return "zk://" + strings.Join(a, ",") + "/fence?session_timeout=" + ttl.String()
			},
			hold:    func(ttl time.Duration) time.Duration { return ttl + 400*time.Millisecond },
			restart: restartMember(env, "zookeeper", zkProcs(e), e.Addrs(), func() (int, error) { return zkLeader(e) }),
			wipe:    wipeZK(e.Addrs(), "/fence"),
			// A server that lost its data comes back with its myid and
			// takes the leader's state (testserver's ReplaceEmpty).
			emptyMember: emptyMember("zookeeper", e.Addrs(), func() (int, error) { return zkLeader(e) }, e.ReplaceEmpty),
		}
		// A leader gives up without a quorum after syncLimit ticks (2 s
		// here), then the others elect one.
		s.setNet(nt, why, e.Addrs(), func() (int, error) { return zkLeader(e) }, func(i int) error { return zkAlone(e, i) }, 4*time.Second)
		// Measured: 1.1 s after a kill, 3.1 s after a cut.
		s.grantWithin = 6 * time.Second
		return s, nil
	})
	server("azblob", "azblob+http", "a private Azurite (Azure Blob leases: TTL 15 s to 60 s, so plans run with TTL 15 s)", func(env *testserver.Env) (*Store, error) {
		var srv *testserver.AzuriteServer
		clock, clockNA := fakeClock(env)
		if err := env.Do(func(tb testing.TB) { srv = testserver.Azurite(tb, clockOpts(clock)...) }); err != nil {
			return nil, err
		}
		s := &Store{
			clock:   oneClock(clock),
			clockNA: clockNA,
			addrs:   []string{srv.Addr()},
			url: func(a []string, _ time.Duration) string {
				return "azblob+http://" + a[0] + "/" + testserver.AzuriteAccount + "/torture"
			},
			restart: restartProcess(env, "azurite", srv.Process),
			wipe:    wipeAzblob(srv.ConnectionString(), "torture"),
			minTTL:  azureMinTTL,
		}
		return s, s.saveEmpty("azurite", srv.Process)
	})
	// secondSeed is Store.emptyDown for the stores whose token seed has a
	// second's resolution: the second is out before the store is back.
	const secondSeed = 1100 * time.Millisecond
	server("aztable", "aztable+http", "a private Azurite Table service (ETag compare-and-swap lease entities)", func(env *testserver.Env) (*Store, error) {
		var srv *testserver.AzuriteTableServer
		clock, clockNA := fakeClock(env)
		if err := env.Do(func(tb testing.TB) { srv = testserver.AzuriteTable(tb, clockOpts(clock)...) }); err != nil {
			return nil, err
		}
		s := &Store{
			clock:   oneClock(clock),
			clockNA: clockNA,
			addrs:   []string{srv.Addr()},
			url: func(a []string, _ time.Duration) string {
				return "aztable+http://" + a[0] + "/" + testserver.AzuriteAccount + "/torture"
			},
			restart: restartProcess(env, "azurite-table", srv.Process),
			wipe:    wipeAztable(srv.TableURL(), "torture"),
			// A contender takes a silent holder's key once it has seen
			// the entity unchanged for a TTL, from its first look after
			// the holder's last write: a polling step (up to 1 s) later.
			hold:      func(ttl time.Duration) time.Duration { return 2*ttl + time.Second },
			emptyDown: secondSeed,
		}
		return s, s.saveEmpty("azurite-table", srv.Process)
	})
	server("dynamodb", "dynamodb", "a private dynalite (record-version compare-and-swap lease items)", func(env *testserver.Env) (*Store, error) {
		var srv *testserver.DynaliteServer
		clock, clockNA := fakeClock(env)
		if err := env.Do(func(tb testing.TB) { srv = testserver.Dynalite(tb, clockOpts(clock)...) }); err != nil {
			return nil, err
		}
		s := &Store{
			clock:   oneClock(clock),
			clockNA: clockNA,
			addrs:   []string{srv.Addr()},
			url: func(a []string, _ time.Duration) string {
				return "dynamodb://" + testserver.DynaliteAccessKey + ":" + testserver.DynaliteSecretKey +
					"@torture?create=1&region=" + testserver.DynaliteRegion + "&endpoint=http://" + a[0]
			},
			restart: restartProcess(env, "dynalite", srv.Process),
			wipe:    wipeDynamo(srv.Endpoint(), "torture"),
			// A contender takes a silent holder's key once it has seen
			// the item unchanged for a TTL, from its first look after
			// the holder's last write: a polling step (up to 1 s) later.
			hold:      func(ttl time.Duration) time.Duration { return 2*ttl + time.Second },
			emptyDown: secondSeed,
		}
		return s, s.saveEmpty("dynalite", srv.Process)
	})
	server("nats", "nats", "a private nats-server with JetStream", func(env *testserver.Env) (*Store, error) {
		var srv *testserver.NATSServer
		clock, clockNA := fakeClock(env)
		if err := env.Do(func(tb testing.TB) { srv = testserver.NATS(tb, clockOpts(clock)...) }); err != nil {
			return nil, err
		}
		s := &Store{
			clock:   oneClock(clock),
			clockNA: clockNA,
			addrs:   []string{srv.Addr()},
			url:     func(a []string, _ time.Duration) string { return "nats://" + a[0] },
			restart: restartProcess(env, "nats-server", srv.Process),
			wipe:    wipeNATS(srv.Addr()),
			// Per-message TTLs are whole seconds, rounded up.
			hold: func(ttl time.Duration) time.Duration { return (ttl + time.Second - 1).Truncate(time.Second) },
			// A server that lost its data lost the bucket too; restoring
			// it as set up would roll its sequence back (docs/nats.md).
			emptyBare: true,
		}
		return s, s.saveEmpty("nats-server", srv.Process)
	})
	server("nats-cluster", "nats", "a private cluster of three nats-servers with a bucket of three replicas, each server on a test host of its own (the restart fault kills the bucket's stream leader and a follower in turn; the partition fault cuts one from its peers)", func(env *testserver.Env) (*Store, error) {
		nt, why, err := onNet(env, 3)
		if err != nil {
			return nil, err
		}
		var c *testserver.NATSClusterServer
		clock, clockNA := fakeClock(env)
		if err := env.Do(func(tb testing.TB) {
			c = testserver.NATSCluster(tb, 3, append(netOpts(nt), clockOpts(clock)...)...)
		}); err != nil {
			return nil, err
		}
		// The workers open the bucket the URL names; it is made here first
		// with three replicas, which the URL cannot ask for.
		// testserver.NATSCluster returns once three replicas can be placed.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		d, err := fencenats.Dial(ctx, c.URL(), fencenats.DefaultBucket, fencenats.WithReplicas(3))
		if err != nil {
			return nil, fmt.Errorf("make the bucket with three replicas: %w", err)
		}
		_ = d.Close()
		var addrs []string
		for _, srv := range c.Servers {
			addrs = append(addrs, srv.Addr())
		}
		s := &Store{
			clock:   oneClock(clock),
			clockNA: clockNA,
			addrs:   addrs,
			url:     func(a []string, _ time.Duration) string { return "nats://" + strings.Join(a, ",") },
			restart: restartMember(env, "nats-server", natsProcs(c), addrs, func() (int, error) { return natsStreamLeader(c) }),
			wipe:    wipeNATS(addrs...),
			hold:    func(ttl time.Duration) time.Duration { return (ttl + time.Second - 1).Truncate(time.Second) },
			// A server that lost its store comes back under its name and
			// takes its replicas back (testserver's ReplaceEmpty).
			emptyMember: emptyMember("nats-server", addrs, func() (int, error) { return natsStreamLeader(c) }, c.ReplaceEmpty),
		}
		// A stream's Raft group elects a new leader some seconds after
		// losing one (docs/reliability.md, "Leader loss in clusters").
		s.setNet(nt, why, addrs, func() (int, error) { return natsStreamLeader(c) }, func(i int) error { return natsAlone(c, i) }, 8*time.Second)
		// Measured: 5.0 s to 5.9 s after a kill or a cut; the stream's
		// election takes seconds.
		s.grantWithin = 12 * time.Second
		return s, nil
	})
	server("k8s", "k8s", "a private kube-apiserver and its etcd (the restart fault restarts them in turn)", func(env *testserver.Env) (*Store, error) {
		var k *testserver.KubeServer
		if err := env.Do(func(tb testing.TB) { k = testserver.Kube(tb) }); err != nil {
			return nil, err
		}
		dir := env.TempDir()
		var n atomic.Int64 // plans run side by side
		s := &Store{
			addrs: []string{k.Addr()},
			// A kubeconfig per URL, naming the address given (a proxy's):
			// the server's certificate is for 127.0.0.1, any port.
			url: func(a []string, _ time.Duration) string {
				path := filepath.Join(dir, fmt.Sprintf("kubeconfig-%d", n.Add(1)))
				base, err := os.ReadFile(k.Kubeconfig())
				if err != nil || !strings.Contains(string(base), k.Host()) {
					env.Errorf("torture: the kube-apiserver's kubeconfig: %v (read %d bytes)", err, len(base))
				}
				cfg := strings.Replace(string(base), k.Host(), "https://"+a[0], 1)
				if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
					env.Errorf("torture: %v", err)
				}
				return "k8s:///default?kubeconfig=" + url.QueryEscape(path)
			},
			restart: restartOneOf(env, "kube-apiserver and etcd", k.Process, k.Etcd.Process),
			wipe:    wipeK8s(k.Kubeconfig(), "default"),
			// leaseDurationSeconds is whole seconds, rounded up, plus one,
			// and a contender takes a silent Lease a duration after it
			// first saw its last version, up to a second later.
			hold: func(ttl time.Duration) time.Duration {
				return (ttl + time.Second - 1).Truncate(time.Second) + 2*time.Second
			},
		}
		return s, s.saveEmpty("kube-apiserver's etcd and kube-apiserver", k.Etcd.Process, k.Process)
	})
}

// fakeClock makes the wall clock a server runs on for the clock-jump
// plan, or says why there is none (no gcc to build it: the plan is n/a).
func fakeClock(env *testserver.Env) (*testserver.FakeClock, string) {
	if !testserver.HaveFakeClock() {
		return nil, "no fake clock: gcc is not installed (Debian package gcc)"
	}
	var c *testserver.FakeClock
	if err := env.Do(func(tb testing.TB) { c = testserver.NewFakeClock(tb) }); err != nil {
		return nil, err.Error()
	}
	return c, ""
}

// clockOpts starts a server on c, if there is one.
func clockOpts(c *testserver.FakeClock) []testserver.Option {
	if c == nil {
		return nil
	}
	return []testserver.Option{testserver.Clock(c)}
}

// zkSession is the ZooKeeper session timeout for leases of ttl: the TTL,
// but at least 2 s, under which sessions fail to even connect on a loaded
// machine (the client's connect timeout follows the session's).
func zkSession(ttl time.Duration) time.Duration { return max(ttl, 2*time.Second) }

// azureMinTTL is the shortest Azure blob lease (fenceazblob.MinTTL).
const azureMinTTL = 15 * time.Second

// restartOneOf restarts the members in turn, one per episode.
func restartOneOf(env *testserver.Env, name string, ps ...*testserver.Process) func(time.Duration, func(string)) (string, error) {
	n := 0
	return func(down time.Duration, started func(string)) (string, error) {
		i := n % len(ps)
		n++
		return restartProcess(env, fmt.Sprintf("%s %d of %d", name, i+1, len(ps)), ps[i])(down, started)
	}
}

// etcdHold is how long etcd may keep a silent holder's lease: fenceetcd's
// session lease is 1.5 TTL in whole seconds, at least etcd's minimum of
// 2 s, counted from the last keepalive.
func etcdHold(ttl time.Duration) time.Duration {
	return max(2*time.Second, (ttl*3/2+time.Second-1).Truncate(time.Second)) + ttl/4
}

// restartMember returns a cluster's Store.restart: it kills the member
// leader names (of members, called names in messages), then a follower,
// in turn, and starts it again on its data.
func restartMember(env *testserver.Env, what string, members []*testserver.Process, names []string, leader func() (int, error)) func(time.Duration, func(string)) (string, error) {
	next := leaderThenFollower(len(members), leader)
	return func(down time.Duration, started func(string)) (string, error) {
		i, role, err := next()
		if err != nil {
			return "", err
		}
		return restartProcess(env, fmt.Sprintf("%s %s %s", what, role, names[i]), members[i])(down, started)
	}
}

// leaderThenFollower returns what chooses the member of a cluster of n
// that an episode acts on: the one leader names, then a follower, in turn.
func leaderThenFollower(n int, leader func() (int, error)) func() (i int, role string, err error) {
	episode := 0
	return func() (int, string, error) {
		i, err := awaitLeader(leader)
		if err != nil {
			return 0, "", err
		}
		role := "leader"
		if episode%2 == 1 {
			i, role = (i+1)%n, "follower"
		}
		episode++
		return i, role, nil
	}
}

// leaderSettle bounds how long awaitLeader asks: a cluster that has just
// had a member back (the previous episode's) may still be electing, but
// one without a leader for this long is a failure of the plan.
const leaderSettle = 20 * time.Second

// awaitLeader asks leader until it names a member, for up to
// leaderSettle.
func awaitLeader(leader func() (int, error)) (int, error) {
	start := time.Now()
	for {
		i, err := leader()
		switch {
		case err == nil:
			return i, nil
		case time.Since(start) >= leaderSettle:
			return 0, fmt.Errorf("no leader after asking for %v: %w", leaderSettle, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// emptyMember returns a cluster's Store.emptyMember: it brings back empty
// (with replace) the member leader names (of members, called names in
// messages), then a follower, in turn.
func emptyMember(what string, names []string, leader func() (int, error), replace func(i int) error) func(func(string)) (string, error) {
	next := leaderThenFollower(len(names), leader)
	return func(started func(string)) (string, error) {
		i, role, err := next()
		if err != nil {
			return "", err
		}
		started(fmt.Sprintf("kill %s %s %s (SIGKILL) and bring it back empty", what, role, names[i]))
		start := time.Now()
		if err := replace(i); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s back empty after %v", names[i], time.Since(start).Round(time.Millisecond)), nil
	}
}

// zkLeader returns the index of the ensemble's leader, as its servers
// report it.
func zkLeader(e *testserver.ZooKeeperEnsembleServer) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if i := slices.Index(e.Servers, e.Leader(ctx)); i >= 0 {
		return i, nil
	}
	return 0, fmt.Errorf("no server of the ensemble says it leads")
}

// natsStreamLeader returns the index of the server leading the default
// bucket's stream, as most servers see it: a server cut off from the
// others may still answer for a leader the others have replaced.
func natsStreamLeader(c *testserver.NATSClusterServer) (int, error) {
	votes := map[int]int{}
	var errs []error
	for _, srv := range c.Servers {
		i, err := natsStreamLeaderFrom(c, "nats://"+srv.Addr())
		if err != nil {
			errs = append(errs, fmt.Errorf("asking %s: %w", srv.Addr(), err))
			continue
		}
		votes[i]++
	}
	for i, v := range votes {
		if v > len(c.Servers)/2 {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no stream leader that most servers agree on (votes by server index %v): %w", votes, errors.Join(errs...))
}

// natsStreamLeaderFrom asks the server at url which server leads the
// default bucket's stream.
func natsStreamLeaderFrom(c *testserver.NATSClusterServer, url string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	js, closeJS, err := natsJetStream(url)
	if err != nil {
		return 0, err
	}
	defer closeJS()
	st, err := js.Stream(ctx, "KV_"+fencenats.DefaultBucket)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	if info.Cluster != nil {
		if i := slices.Index(c.Servers, c.Named(info.Cluster.Leader)); i >= 0 {
			return i, nil
		}
	}
	return 0, fmt.Errorf("the bucket's stream has no leader among the cluster's servers (%+v)", info.Cluster)
}

// etcdAlone says whether member i of the cluster has lost its leader, as
// it reports itself: nil if it names none.
func etcdAlone(c *testserver.EtcdClusterServer, i int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ep := c.Endpoints()[i]
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 3 * time.Second})
	if err != nil {
		return err
	}
	defer cli.Close()
	st, err := cli.Status(ctx, ep)
	switch {
	case err != nil:
		return fmt.Errorf("its status: %w", err)
	case st.Leader != 0:
		return fmt.Errorf("it names leader %x", st.Leader)
	}
	return nil
}

// zkAlone says whether server i of the ensemble has lost its quorum: nil
// if it does not serve.
func zkAlone(e *testserver.ZooKeeperEnsembleServer, i int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	mode, err := e.Servers[i].Mode(ctx)
	switch {
	case err != nil:
		return err
	case mode != "":
		return fmt.Errorf("it serves as %s", mode)
	}
	return nil
}

// natsAlone says whether server i of the cluster has lost the bucket's
// stream: nil if, asked through it, JetStream names no leader.
func natsAlone(c *testserver.NATSClusterServer, i int) error {
	l, err := natsStreamLeaderFrom(c, "nats://"+c.Servers[i].Addr())
	if err != nil {
		return nil
	}
	return fmt.Errorf("through it, the stream's leader is %s", c.Servers[l].Addr())
}

// etcdLeader returns the index of the cluster's leader, as its members
// report it.
func etcdLeader(c *testserver.EtcdClusterServer) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		return 0, err
	}
	defer cli.Close()
	ids := make([]uint64, len(c.Members))
	votes := map[uint64]int{}
	for i, ep := range c.Endpoints() {
		st, err := cli.Status(ctx, ep)
		if err != nil {
			continue // a member down or starting
		}
		ids[i] = st.Header.MemberId
		if st.Leader != 0 {
			votes[st.Leader]++
		}
	}
	// The leader most members name: a member cut off from the others may
	// still name the leader it lost.
	var leader uint64
	for id, v := range votes {
		if v > votes[leader] {
			leader = id
		}
	}
	for i, id := range ids {
		if id != 0 && id == leader {
			return i, nil
		}
	}
	return 0, fmt.Errorf("no etcd member reports itself the leader (members %x, leader %x)", ids, leader)
}

// builtIn reports whether kind k's driver is in this build.
func (k kind) builtIn() bool { return k.scheme == "" || storeurl.Registered(k.scheme) }

// etcdProcs, etcdNames, zkProcs and natsProcs list a cluster's member
// processes (and etcd's member names) for restartMember.
func etcdProcs(c *testserver.EtcdClusterServer) (ps []*testserver.Process) {
	for _, m := range c.Members {
		ps = append(ps, m.Process)
	}
	return ps
}

func etcdNames(c *testserver.EtcdClusterServer) (names []string) {
	for _, m := range c.Members {
		names = append(names, m.Name())
	}
	return names
}

func zkProcs(e *testserver.ZooKeeperEnsembleServer) (ps []*testserver.Process) {
	for _, s := range e.Servers {
		ps = append(ps, s.Process)
	}
	return ps
}

func natsProcs(c *testserver.NATSClusterServer) (ps []*testserver.Process) {
	for _, s := range c.Servers {
		ps = append(ps, s.Process)
	}
	return ps
}
