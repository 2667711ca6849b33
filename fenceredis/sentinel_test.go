package fenceredis

import (
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// A Sentinel failover, through go-redis's failover client. Replication is
// asynchronous, so what a failover keeps depends on what reached the
// replica; the test makes both cases happen on purpose:
//
//   - "kept" is held, and its lock is on the replica (WAIT) when the
//     master dies: the lease survives, its renewals go to the new master.
//   - "vanished" is acquired while the replica is cut off from the master
//     (the replica paused, its replication link killed), so the new master
//     never saw that acquisition: neither the lock nor the counter update.
//     Its holder loses the lease at its next renewal, and the next token
//     is still above the lost one, from the new master's clock.
//
// Whatever the failover lost, tokens issued after it are above every token
// issued for the same key before it. Release wake-ups work on the new
// master, for a waiter subscribed before the failover and for a new one.
func TestSentinelFailover(t *testing.T) {
	ctx := testCtx(t)
	rs := testserver.RedisSentinel(t, 1, 3)
	connect := connectSentinel(rs)
	master, replica := rs.Master(), rs.Replicas()[0]
	const ttl, renew = 30 * time.Second, time.Second // the TTL outlasts the failover
	c := mustClient(t, mustOpen(t, connect), fence.WithTTL(ttl), fence.WithRenewInterval(renew))
	other := mustClient(t, mustOpen(t, connect), fence.WithTTL(ttl))
	watcher := mustOpen(t, connect).(*Store)
	onMaster := newClient(master.Addr())
	defer onMaster.Close()

	// Highest token issued per key before the failover.
	before := map[string]int64{}
	issued := func(l *fence.Lease) {
		before[l.Key()] = max(before[l.Key()], l.Token())
	}
	replicated := func() {
		t.Helper()
		if n, err := onMaster.Wait(ctx, 1, 10*time.Second).Result(); err != nil || n != 1 {
			t.Fatalf("WAIT 1 = %d, %v; want the replica to have everything", n, err)
		}
	}
	cycle := func(key string) *fence.Lease {
		t.Helper()
		l, err := other.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		return l
	}
	for range 3 {
		issued(cycle("free"))
	}
	issued(cycle("vanished")) // its counter reaches the replica
	kept, err := c.TryAcquire(ctx, "kept")
	if err != nil {
		t.Fatal(err)
	}
	issued(kept)
	watched, err := watcher.Watch(ctx, "watched")
	if err != nil {
		t.Fatal(err)
	}
	replicated()
	counterBefore := before["vanished"]

	// Cut the replica off, acquire "vanished" where only the master sees
	// it, and kill the master before the replica can catch up.
	replica.Stop()
	if n, err := onMaster.ClientKillByFilter(ctx, "TYPE", "replica").Result(); err != nil || n != 1 {
		replica.Cont()
		t.Fatalf("CLIENT KILL TYPE replica = %d, %v; want the replica's link cut", n, err)
	}
	vanished, err := c.TryAcquire(ctx, "vanished")
	if err != nil {
		replica.Cont()
		t.Fatal(err)
	}
	issued(vanished)
	master.Kill()
	replica.Cont()
	killed := time.Now()
	promoted := rs.WaitFailover(master)
	failedOver := time.Now()
	t.Logf("failover to %s took %v", promoted.Addr(), failedOver.Sub(killed).Round(time.Millisecond))
	if promoted != replica {
		t.Fatalf("promoted %s; want the replica %s", promoted.Addr(), replica.Addr())
	}

	// The new master never saw the last acquisition of "vanished": its lock
	// is absent and its counter is the one from before.
	onNew := newClient(promoted.Addr())
	defer onNew.Close()
	n := lockNames(DefaultPrefix, "vanished")
	if exists, err := onNew.Exists(ctx, n.lock).Result(); err != nil || exists != 0 {
		t.Fatalf("the lock of \"vanished\" is on the new master (%d, %v): the replica was not cut off", exists, err)
	}
	counter, err := onNew.Get(ctx, n.counter).Int64()
	if err != nil || counter != counterBefore {
		t.Fatalf("counter of \"vanished\" on the new master = %d, %v; want %d, from before the replica was cut off", counter, err, counterBefore)
	}
	t.Logf("\"vanished\": token %d lost with the failover; the new master's counter says %d", vanished.Token(), counter)

	// Its holder finds out at its next renewal.
	select {
	case <-vanished.Done():
		t.Logf("\"vanished\" lost %v after the failover", time.Since(failedOver).Round(time.Millisecond))
	case <-time.After(renew + 5*time.Second): // a renewal that failed during the failover takes a while to give up
		t.Fatalf("holder of \"vanished\" still holds it %v after the failover, its lock gone", time.Since(failedOver))
	}
	var lost *fence.LostError
	if !errors.As(vanished.Err(), &lost) || lost.Reason != fence.LossRefused {
		t.Errorf("\"vanished\" lost with %v; want a *LostError with reason %q", vanished.Err(), fence.LossRefused)
	}

	// "kept" reached the replica, so the new master extends it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := kept.Renew(ctx)
		if err == nil {
			break
		}
		if errors.Is(err, fence.ErrLost) || time.Now().After(deadline) {
			t.Fatalf("renewing \"kept\" after the failover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if h, err := other.Inspect(ctx, "kept"); err != nil || h.Token != kept.Token() {
		t.Fatalf("Inspect(kept) on the new master = %+v, %v; want token %d", h, err, kept.Token())
	}
	if err := kept.Release(ctx); err != nil {
		t.Fatalf("releasing \"kept\" on the new master: %v", err)
	}

	// The subscription made before the failover moved to the new master:
	// its waiter is woken when go-redis subscribes again there, and then
	// hears releases.
	select {
	case <-watched:
	case <-time.After(30 * time.Second):
		t.Fatal("no wake-up after the failover (resubscription on the new master)")
	}
	fresh, err := mustOpen(t, connect).(*Store).Watch(ctx, "watched")
	if err != nil {
		t.Fatalf("Watch on the new master: %v", err)
	}
	cycle("watched")
	for name, ch := range map[string]<-chan struct{}{"subscribed before the failover": watched, "subscribed after": fresh} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("waiter %s: release on the new master not heard", name)
		}
	}

	// Every token issued after the failover is above every token issued
	// before it for the same key, lost ones included.
	for _, key := range []string{"free", "vanished", "kept"} {
		l, err := other.TryAcquire(ctx, key)
		if err != nil {
			t.Fatalf("%s after the failover: %v", key, err)
		}
		t.Logf("%s: token %d after the failover, highest before %d", key, l.Token(), before[key])
		if l.Token() <= before[key] {
			t.Errorf("%s: token %d after the failover is not above %d, issued before it", key, l.Token(), before[key])
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// A failover whose old master stays up, as an operator makes for
// maintenance (SENTINEL FAILOVER): Sentinel demotes the old master and
// closes its clients' connections, go-redis follows to the new master, a
// lease whose lock was replicated survives, and waiters subscribed before
// hear releases made on the new master.
func TestSentinelSwitchover(t *testing.T) {
	ctx := testCtx(t)
	rs := testserver.RedisSentinel(t, 1, 1)
	connect := connectSentinel(rs)
	old := rs.Master()
	c := mustClient(t, mustOpen(t, connect), fence.WithTTL(30*time.Second), fence.WithRenewInterval(time.Second))
	other := mustClient(t, mustOpen(t, connect))
	watcher := mustOpen(t, connect).(*Store)

	held, err := c.TryAcquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	watched, err := watcher.Watch(ctx, "watched")
	if err != nil {
		t.Fatal(err)
	}
	onOld := newClient(old.Addr())
	defer onOld.Close()
	if n, err := onOld.Wait(ctx, 1, 10*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v", n, err)
	}
	sentinel := redis.NewSentinelClient(&redis.Options{Addr: rs.SentinelAddrs()[0]})
	defer sentinel.Close()
	if err := sentinel.Failover(ctx, rs.MasterName()).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	promoted := rs.WaitFailover(old)
	rs.WaitReady() // the old master is a replica of the new one
	t.Logf("switched over from %s to %s", old.Addr(), promoted.Addr())

	deadline := time.Now().Add(30 * time.Second)
	for {
		err := held.Renew(ctx)
		if err == nil {
			break
		}
		if errors.Is(err, fence.ErrLost) || time.Now().After(deadline) {
			t.Fatalf("renewing after the switchover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	select {
	case <-watched:
	case <-time.After(30 * time.Second):
		t.Fatal("no wake-up after the switchover (resubscription on the new master)")
	}
	l, err := other.TryAcquire(ctx, "watched")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-watched:
	case <-time.After(10 * time.Second):
		t.Fatal("release on the new master not heard by a waiter subscribed before the switchover")
	}
	if err := held.Release(ctx); err != nil {
		t.Fatalf("release after the switchover: %v", err)
	}
	l, err = other.TryAcquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	if l.Token() <= held.Token() {
		t.Errorf("token %d after the switchover is not above %d", l.Token(), held.Token())
	}
	_ = l.Release(ctx)
}
