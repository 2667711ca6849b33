// Package testserver starts private server processes for fence's tests:
// redis-server, PostgreSQL, MariaDB, etcd, ZooKeeper, nats-server, Azurite,
// dynalite and kube-apiserver, each on free loopback ports with its own data
// directory, so that driver tests, the conformance suite and fault tests
// run against real servers they own and can kill, pause and restart. It
// never uses the servers a machine may already run on their standard ports.
//
// # Starting servers
//
// Every start function takes the test, waits until the server answers a
// protocol-level ping (not just an open port) for up to ReadyTimeout, and
// registers a t.Cleanup that kills the server and removes its data:
//
//	r := testserver.Redis(t)                   // r.Addr(), r.URL()
//	rs := testserver.Redises(t, 3)             // independent servers, for Redlock
//	rc := testserver.RedisCluster(t, 3)        // rc.Addrs(), rc.Nodes[i]
//	rs := testserver.RedisSentinel(t, 1, 3)    // rs.MasterName(), rs.SentinelAddrs(), rs.Master()
//	pg := testserver.Postgres(t)               // pg.DSN(): postgres://postgres@127.0.0.1:P/test?sslmode=disable
//	pp := testserver.PostgresPair(t, testserver.Synchronous) // pp.Primary(), pp.Standby(), pp.Promote(), pp.Rejoin()
//	my := testserver.MariaDB(t)                // my.DSN(): root@tcp(127.0.0.1:P)/test
//	e := testserver.Etcd(t)                    // e.Endpoints()
//	ec := testserver.EtcdCluster(t, 3)         // ec.Endpoints(), ec.Members[i]
//	zk := testserver.ZooKeeper(t)              // zk.Addr(); tickTime 200ms
//	ze := testserver.ZooKeeperEnsemble(t, 3)   // ze.Addrs(), ze.Leader(ctx), ze.Servers[i]
//	n := testserver.NATS(t)                    // n.URL(), n.Version(), n.AtLeast("2.11")
//	nc := testserver.NATSCluster(t, 3)         // nc.URL() (every server), nc.Named(streamLeader)
//	az := testserver.Azurite(t)                // az.BlobURL(), az.ConnectionString()
//	d := testserver.Dynalite(t)                // d.Endpoint(); DynaliteRegion, DynaliteAccessKey, ...
//	k := testserver.Kube(t)                    // k.Host(), k.Token(), k.CAFile(), k.Kubeconfig(); k.Etcd
//
// A server that does not come up fails the test with the program, its
// arguments and the tail of its log. The log of every server is written to a
// file under t.TempDir(), and its tail is printed if the test fails.
//
// # Credentials
//
// Token and Password make a NATS or Redis server require credentials of
// every client, and SentinelPassword the Sentinels of a RedisSentinel; the
// readiness checks give them, so a test sees them refused or taken:
//
//	n := testserver.NATS(t, testserver.Token("tok"))              // nats://tok@host
//	n := testserver.NATS(t, testserver.Password("u", "pw"))       // nats://u:pw@host
//	r := testserver.Redis(t, testserver.Password("", "pw"))       // redis://:pw@host
//	rs := testserver.RedisSentinel(t, 1, 1,
//		testserver.Password("", "pw"), testserver.SentinelPassword("spw"))
//
// # Faults
//
// Every server embeds *Process:
//
//   - Kill sends SIGKILL to the server and everything it started, and waits
//     until they are gone;
//   - Stop and Cont send SIGSTOP and SIGCONT to all of them: a paused server
//     keeps its connections open and answers nothing, like a GC pause or a
//     frozen VM;
//   - Restart starts the server again on the same port with the same data
//     directory and waits until it answers. Redis comes back empty (it
//     persists nothing); PostgreSQL, MariaDB, etcd and ZooKeeper keep their
//     data.
//
// Kill, Stop and Cont may be called from any goroutine; Restart fails the
// test on error and so must be called from the test goroutine.
//
// A PostgresPair fails over when told to: kill its Primary() and Promote
// the standby, which then takes writes; Rejoin brings the other node back
// as a standby of the new primary (a fresh pg_basebackup), so that the
// pair can fail over again. Synchronous replication loses no commit a
// client saw succeed; Asynchronous can.
//
// A RedisSentinel setup fails over for real: kill its Master() and
// WaitFailover returns the replica the Sentinels promoted, typically a few
// seconds later (SentinelDownAfter, then an election). The data servers
// keep their role in a configuration file that Sentinel rewrites, so a
// restarted old master rejoins as a replica once the Sentinels reconfigure
// it; WaitReady waits for that.
//
// # Partitions between cluster members
//
// NewNet makes test hosts: a network namespace per host, with an address
// of its own, joined by a bridge that the test's own namespace is on too.
// A cluster started OnNet (EtcdCluster, ZooKeeperEnsemble, NATSCluster,
// RedisSentinel, RedisClusterReplicas, PostgresPair) runs member i on
// host i; Partition (or Isolate)
// cuts the links between hosts with blackhole routes while every client
// in the test's namespace still reaches every member, and Heal restores
// them. Nothing leaves the machine. It needs root and the ip program
// (iproute2), and is Unavailable without them:
//
//	n := testserver.NewNet(t, 3)
//	ec := testserver.EtcdCluster(t, 3, testserver.OnNet(n))
//	n.Isolate(0) // member 0 loses its peers, not its clients
//	n.Heal()
//
// # Stores that are down or hung, processes that die
//
// ClosedAddr returns a loopback address that refuses connections, as a
// store that is down; SilentAddr one that accepts them and never
// answers, as a hung store. Rerun starts a copy of the test binary that
// runs the calling test only, for the test to kill with SIGKILL as a
// waiter or holder that dies:
//
//	if os.Getenv("MY_WAITER") != "" { /* the child's part */ return }
//	w := testserver.Rerun(t, "MY_WAITER=1") // w.Pid(), w.Output()
//	w.Kill()
//
// # Outside tests
//
// Programs that are not tests (the torture tool) pass an *Env where a
// testing.TB is asked for, inside Env.Do, which turns a failure or a skip
// into an error; Env.Close kills what was started.
//
// # Missing programs: skip, or fail under FENCE_TEST_STRICT=1
//
// The servers' programs are found on PATH and where their packages put them
// (/usr/lib/postgresql/*/bin, /usr/sbin), and nats-server, azurite-blob and
// dynalite first in RepoRoot()/.tools, where scripts/test installs current versions.
// When a program is missing, the test is skipped with a message saying what
// to install (see Require and Unavailable); with FENCE_TEST_STRICT=1, as in
// CI, it fails instead, so an untested backend cannot pass unseen. Only
// absence skips: a program that exists but fails to start is always a test
// failure. scripts/test installs everything these servers need. To use
// other builds, set FENCE_NATS_SERVER, FENCE_AZURITE (an azurite-blob),
// FENCE_DYNALITE or FENCE_ZOOKEEPER_JAR.
//
// # Ports and users
//
// Ports are chosen at random below the kernel's ephemeral range and checked
// free; should another process take one before the server binds it (go test
// runs packages in parallel), the start is retried on another port, and a
// server is accepted only if the socket answering on its port is its own.
// Run as root, PostgreSQL (which refuses root) runs as the postgres system
// user, or nobody; MariaDB is started with --user=root.
package testserver
