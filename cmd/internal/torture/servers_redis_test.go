package torture

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestFailoverLossCaught is the proof that a failover's loss is accounted
// for, and no more: the restart plan on redis-sentinel with the replicas
// cut off from the master (stopped, their links killed) until the master
// has granted a lease they never receive, and is killed. The promoted
// replica has the key free, and another worker is granted it while the
// lost lease's holder still believes in it (until its first renewal
// finds no lock): an overlap. Marked as a loss at the kill
// (Store.failover's lost), it is one crashOverlap explains, and the plan
// must be clean; reported as a plain restart, the same overlap must fail
// the plan.
func TestFailoverLossCaught(t *testing.T) {
	t.Parallel()
	cfg := short(FaultRestart, false)
	// The lost lease's holder first renews it a third of the TTL after
	// its grant: after the promotion (some 3.5 s after the kill), and
	// later than the overlap slack (a tenth of the TTL) after the next
	// grant. Its slow step outlasts that renewal, so it holds the key
	// until the renewal ends it.
	cfg.TTL = 20 * time.Second
	cfg.Workers = 4
	cfg.Writes = 1
	cfg.Work = 10 * time.Second
	lossMarking(t, cfg, func(t *testing.T, env *testserver.Env, marked bool) *Store {
		var srv *testserver.RedisSentinelServer
		startIn(t, env, func(tb testing.TB) { srv = testserver.RedisSentinel(tb, 2, 3) })
		s, err := sentinelStore(env, srv)
		if err != nil {
			t.Fatal(err)
		}
		s.Name = "redis-sentinel-cut-replicas"
		s.failover = cutReplicasThenFailover(env, srv, marked)
		return s
	})
}

// cutReplicasThenFailover returns a Store.failover for a redis-sentinel
// store on srv that stops the replicas and kills their replication links,
// lets the master grant leases alone for a moment, then kills it (calling
// lost if marked, else started), resumes the replicas and waits for the
// failover and the old master's return.
func cutReplicasThenFailover(env *testserver.Env, srv *testserver.RedisSentinelServer, marked bool) func(time.Duration, func(string), func(string)) (string, error) {
	return func(_ time.Duration, started, lost func(string)) (string, error) {
		var m *testserver.RedisServer
		var rs []*testserver.RedisServer
		if err := env.Do(func(testing.TB) { m, rs = srv.Master(), srv.Replicas() }); err != nil {
			return "", err
		}
		for _, r := range rs {
			r.Stop()
		}
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		defer c.Close()
		if err := c.Do(context.Background(), "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
			return "", err
		}
		// The kill comes right after the master grants a lease the
		// replicas never receive.
		if err := awaitGrant(c); err != nil {
			return "", err
		}
		report := started
		if marked {
			report = lost
		}
		var forgetErr error
		desc, err := sentinelFailover(env, srv, m, func(what string) {
			for _, r := range rs {
				r.Cont()
				if err := forgetLocks(r.Addr()); err != nil && forgetErr == nil {
					forgetErr = err
				}
			}
			report(what + ", its replicas cut off from it since before its last grant")
		})
		if forgetErr != nil {
			return "", forgetErr
		}
		return desc, err
	}
}

// awaitGrant waits until the server c talks to grants a torture key's lock
// anew: a token counter (fence:{...}:token) changes.
func awaitGrant(c *redis.Client) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	counters := func() (map[string]string, error) {
		out := map[string]string{}
		iter := c.Scan(ctx, 0, "fence:{torture/*}:token", 1000).Iterator()
		for iter.Next(ctx) {
			v, err := c.Get(ctx, iter.Val()).Result()
			if err != nil && err != redis.Nil {
				return nil, err
			}
			out[iter.Val()] = v
		}
		return out, iter.Err()
	}
	before, err := counters()
	if err != nil {
		return err
	}
	for {
		now, err := counters()
		if err != nil {
			return fmt.Errorf("waiting for a grant: %w", err)
		}
		for k, v := range now {
			if before[k] != v {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no lease granted for %v with the replicas cut off", time.Minute)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// forgetLocks deletes the torture keys' locks on the replica at addr (made
// writable for the moment): as if it lagged since before the grant of the
// lease released last before the cut. Else that lease, released on the
// master only, would hold the key on the promoted replica for a TTL and
// keep every contender out past the lost lease's first renewal.
func forgetLocks(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	if err := c.ConfigSet(ctx, "replica-read-only", "no").Err(); err != nil {
		return err
	}
	iter := c.Scan(ctx, 0, "fence:{torture/*}", 1000).Iterator()
	for iter.Next(ctx) {
		if err := c.Del(ctx, iter.Val()).Err(); err != nil {
			return err
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	return c.ConfigSet(ctx, "replica-read-only", "yes").Err()
}
