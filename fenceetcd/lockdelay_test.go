package fenceetcd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceetcd"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// lockDelay is the delay of these tests: a few seconds, as etcd's
// leases count whole seconds.
const lockDelay = 3 * time.Second

// delaySetup returns a holder's Client and a contender's, each on its own
// driver (its own sessions), and the etcd client beside them.
func delaySetup(t *testing.T) (context.Context, *clientv3.Client, *fence.Client, *fence.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	endpoints := testserver.Etcd(t).Endpoints()
	cli := newClient(t, endpoints)
	var cs [2]*fence.Client
	for i := range cs {
		d := fenceetcd.New(newClient(t, endpoints))
		t.Cleanup(func() { d.Close() })
		cs[i] = fence.New(d, fence.WithTTL(ttl))
	}
	return ctx, cli, cs[0], cs[1]
}

// revokeHolder revokes the session lease of key's holder, as an operator
// or etcd's expiry would end it, and returns when.
func revokeHolder(t *testing.T, ctx context.Context, cli *clientv3.Client, c *fence.Client, key string) time.Time {
	t.Helper()
	d := c.Driver().(*fenceetcd.Store)
	resp, err := cli.Get(ctx, d.Dir(key), clientv3.WithFirstCreate()...)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("holder entry of %q: %v, %d entries", key, err, len(resp.Kvs))
	}
	at := time.Now()
	if _, err := cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	return at
}

// wantLostHolder checks that key is held by the lost lease l.
func wantLostHolder(t *testing.T, ctx context.Context, c *fence.Client, key string, l *fence.Lease, why string) {
	t.Helper()
	_, err := c.TryAcquire(ctx, key)
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Token != l.Token() || held.Holder.Owner != l.Owner() {
		t.Fatalf("TryAcquire %s: %v; want a HeldError naming the lost holder (token %d)", why, err, l.Token())
	}
	h, err := c.Inspect(ctx, key)
	if err != nil || h.Token != l.Token() || h.ExpiresIn <= 0 || h.ExpiresIn > lockDelay+5*time.Second {
		t.Fatalf("Inspect %s: %+v, %v; want the lost holder (token %d), free within the delay", why, h, err, l.Token())
	}
	hs, err := c.List(ctx, "")
	if err != nil || len(hs) != 1 || hs[0].Token != l.Token() || hs[0].ExpiresIn <= 0 {
		t.Fatalf("List %s: %+v, %v; want the lost holder (token %d)", why, hs, err, l.Token())
	}
}

// A lost holder's late Release does not lift its lock-delay. The
// Client does not release a lease it knows lost, so the driver's claim
// is released here, as a Client that had not noticed would. Shown to
// fail by deleting the delay entry in releaseChecked whatever its
// compare finds (an Else branch with the delete): the key is then free
// at once.
func TestLockDelayLateReleaseKeepsTheDelay(t *testing.T) {
	ctx, cli, a, b := delaySetup(t)
	claim, err := a.Driver().TryAcquire(ctx, fence.Request{Key: "k", Owner: "lost", TTL: ttl, Kind: fence.KindLock, LockDelay: lockDelay})
	if err != nil {
		t.Fatal(err)
	}
	revokeHolder(t, ctx, cli, a, "k")
	if err := claim.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("the lost holder's Release: %v; want ErrNotHeld", err)
	}
	_, err = b.TryAcquire(ctx, "k")
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Token != claim.Token() || held.Holder.Owner != "lost" {
		t.Fatalf("TryAcquire after the lost holder's late Release: %v; want a HeldError naming it (token %d)", err, claim.Token())
	}
}

// A revoke of the holder's session starts the delay at once, and the
// driver that learns of it moves the delay to a lease of the delay alone,
// so the key is free about the delay after the revoke, not the session's
// TTL later. Shown to fail by (1) dropping the compare that the delay
// entry is absent (delayFree) from TryAcquire: the key is free at once;
// (2) not calling startDelays when the session is gone (session.keep):
// the key is free the session's TTL later.
func TestLockDelayAfterSessionRevoke(t *testing.T) {
	ctx, cli, a, b := delaySetup(t)
	l, err := a.TryAcquire(ctx, "k", fence.WithLockDelay(lockDelay), fence.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	revoked := revokeHolder(t, ctx, cli, a, "k")
	select {
	case <-l.Done():
	case <-time.After(ttl):
		t.Fatal("lease not lost after its session was revoked")
	}
	wantLostHolder(t, ctx, b, "k", l, "after the holder's session was revoked")
	for {
		got, err := b.TryAcquire(ctx, "k")
		if err == nil {
			at := time.Since(revoked)
			if at < lockDelay-100*time.Millisecond {
				t.Errorf("free %v after the revoke; want no sooner than the delay %v", at, lockDelay)
			}
			// The session's TTL is 1.5 ttl: 3 s here.
			if at > lockDelay+2*time.Second {
				t.Errorf("free %v after the revoke; want about the delay %v", at, lockDelay)
			}
			if got.Token() <= l.Token() {
				t.Errorf("token %d after the delay; want above the lost holder's %d", got.Token(), l.Token())
			}
			_ = got.Release(ctx)
			return
		}
		if !errors.As(err, new(*fence.HeldError)) {
			t.Fatal(err)
		}
		if time.Since(revoked) > lockDelay+10*time.Second {
			t.Fatal("the key not free long after the delay")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A waiter queued behind a holder that is lost takes the key when the
// delay ends, not before, and promptly. Shown to fail by dropping the
// compare that the delay entry is absent (delayFree) from rebind: the
// waiter takes the key at once after the revoke.
func TestLockDelayWaitersWakeAtItsEnd(t *testing.T) {
	ctx, cli, a, b := delaySetup(t)
	l, err := a.TryAcquire(ctx, "k", fence.WithLockDelay(lockDelay), fence.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *fence.Lease
		err error
		at  time.Time
	}
	done := make(chan result, 1)
	go func() {
		w, err := b.Acquire(ctx, "k", fence.WithWait(time.Minute))
		done <- result{w, err, time.Now()}
	}()
	d := a.Driver().(*fenceetcd.Store)
	for { // until the waiter is queued
		resp, err := cli.Get(ctx, d.Dir("k"), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == 2 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	revoked := revokeHolder(t, ctx, cli, a, "k")
	r := <-done
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	defer r.l.Release(ctx)
	at := r.at.Sub(revoked)
	if at < lockDelay-100*time.Millisecond {
		t.Errorf("waiter took the key %v after the revoke; want no sooner than the delay %v", at, lockDelay)
	}
	if at > lockDelay+2*time.Second {
		t.Errorf("waiter took the key %v after the revoke; want about the delay %v", at, lockDelay)
	}
	if r.l.Token() <= l.Token() {
		t.Errorf("waiter's token %d; want above the lost holder's %d", r.l.Token(), l.Token())
	}
}

// A release frees the key at once and leaves neither delay entry nor
// lease behind. Shown to fail by not deleting the delay entry in
// releaseChecked: the key stays held.
func TestLockDelayReleaseLeavesNothing(t *testing.T) {
	ctx, cli, a, b := delaySetup(t)
	leases, err := cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := len(leases.Leases)
	l, err := a.TryAcquire(ctx, "k", fence.WithLockDelay(lockDelay))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := b.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire after the release: %v; want free at once", err)
	}
	_ = got.Release(ctx)
	resp, err := cli.Get(ctx, "", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if strings.HasSuffix(string(kv.Key), "%lockdelay") {
			t.Errorf("left behind: %s", kv.Key)
		}
	}
	// Each driver keeps its session lease; the delay lease is gone.
	leases, err = cli.Leases(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(leases.Leases) - before; n > 2 {
		t.Errorf("%d leases more than before the acquisition; want only the two sessions", n)
	}
}

// The delay lease is kept alive with the session: a lease held for
// longer than the delay lease's own TTL still keeps its delay when its
// session is revoked. Shown to fail by not calling keepDelays in
// session.refresh: the delay entry has expired by then, and the key is
// free at once.
func TestLockDelayOutlivesTheDelayLeaseTTL(t *testing.T) {
	ctx, cli, a, b := delaySetup(t)
	const delay = time.Second
	l, err := a.TryAcquire(ctx, "k", fence.WithLockDelay(delay))
	if err != nil {
		t.Fatal(err)
	}
	// The session's TTL (1.5 ttl) plus the delay, and more.
	time.Sleep(3*ttl/2 + delay + time.Second)
	revokeHolder(t, ctx, cli, a, "k")
	<-l.Done()
	_, err = b.TryAcquire(ctx, "k")
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Token != l.Token() {
		t.Fatalf("TryAcquire after a long-held lease's session was revoked: %v; want a HeldError naming it (token %d)", err, l.Token())
	}
}

// TryAcquireAll honours a lost holder's delay, and keeps its own. Shown
// to fail by dropping the compare that the delay entry is absent
// (delayFree) from tryAcquireAll: the keys are taken at once.
func TestLockDelayAcquireAll(t *testing.T) {
	ctx, cli, a, b := delaySetup(t)
	set, err := a.TryAcquireAll(ctx, []string{"j", "k"}, fence.WithLockDelay(lockDelay), fence.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	revokeHolder(t, ctx, cli, a, "k") // the session of both
	<-set.Done()
	_, err = b.TryAcquireAll(ctx, []string{"j", "k"})
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Key != "j" {
		t.Fatalf("TryAcquireAll within the lost holder's delay: %v; want a HeldError naming the lost holder of j", err)
	}
}

// A resumed lease keeps its lock-delay: its delay entry moves to a delay
// lease of the resuming driver, so the dead process's end does not take
// it. Shown to fail by not moving it in resume (moveDelay returning nil):
// the dead process's Close starts the delay then, it ends, and the key
// is free at once when the resumed lease's session is revoked.
func TestLockDelayResumedKeepsIt(t *testing.T) {
	ctx, cli, a, b := delaySetup(t)
	const delay = 2 * time.Second // etcd's smallest lease TTL here
	l, err := a.TryAcquire(ctx, "k", fence.WithLockDelay(delay), fence.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	r, err := b.TryAcquire(ctx, "k", fence.WithResume(l.Owner(), l.Token()))
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	a.Driver().(*fenceetcd.Store).Close() // the old process ends
	time.Sleep(delay + 2*time.Second)
	revokeHolder(t, ctx, cli, b, "k")
	<-r.Done()
	_, err = b.TryAcquire(ctx, "k")
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Token != l.Token() {
		t.Fatalf("TryAcquire after the resumed lease's session was revoked: %v; want a HeldError naming it (token %d)", err, l.Token())
	}
}
