// Package leaderloss checks a store's cluster through the loss of its
// leader: the member that orders the writes of fence's keys (a NATS
// stream's leader, a ZooKeeper ensemble's leader) killed while a key is
// held. Two checks, each on a key of its own:
//
//   - a waiter waits through the election and gets the key, with a
//     greater token, once the holder releases it: not an error at once
//     (the store's errors meanwhile must match fence.ErrUnavailable, which
//     the core waits through);
//   - a holder that nobody releases keeps its lease through the election
//     or learns that it lost it, and a contender trying all along is never
//     granted the key while the holder still believes it holds it.
//
// The time from each kill to the next grant is logged. The killed member
// is started again on its data, and tokens must go on growing.
package leaderloss

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing/fence"
)

// Cluster is what the checks need of a store's cluster.
type Cluster struct {
	// Holder and Waiter are Clients of the store, each on its own
	// connections, with TTL as their lease TTL.
	Holder, Waiter *fence.Client
	TTL            time.Duration
	// KillLeader kills the member leading key's writes and returns a
	// function that starts it again on its data.
	KillLeader func(t *testing.T, key string) (restart func())
	// GrantWithin, if set, bounds the time from the kill to the waiter's
	// grant: the store's election and the holder's release, with room
	// for a loaded machine (a driver whose release waits out the store's
	// own request timeout fails it).
	GrantWithin time.Duration
}

// grantWithin bounds the time from the leader's kill to the next grant
// of a key whose holder lost it.
const grantWithin = 30 * time.Second

// keptAfter: a holder whose lease is still valid this many TTLs after the
// kill has kept it through the election.
const keptAfter = 5

// Run runs both checks.
func Run(t *testing.T, c Cluster) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t.Run("WaiterGetsKeyAfterElection", func(t *testing.T) { waiter(ctx, t, c) })
	t.Run("HolderKeepsOrLosesLoudly", func(t *testing.T) { holder(ctx, t, c) })
}

func waiter(ctx context.Context, t *testing.T, c Cluster) {
	l, err := c.Holder.Acquire(ctx, "wait")
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		l   *fence.Lease
		err error
		at  time.Time
	}
	got := make(chan result, 1)
	go func() {
		w, err := c.Waiter.Acquire(ctx, "wait", fence.WithWait(time.Minute))
		got <- result{w, err, time.Now()}
	}()
	select {
	case r := <-got:
		t.Fatalf("Acquire of a held key returned before the kill: %v", r.err)
	case <-time.After(c.TTL / 2):
	}
	restart := c.KillLeader(t, "wait")
	killed := time.Now()
	relErr := l.Release(ctx)
	r := <-got
	if r.err != nil {
		t.Fatalf("Acquire waiting through the leader's loss: %v; want the key once a new leader is elected (the holder's release: %v)", r.err, relErr)
	}
	after := r.at.Sub(killed)
	t.Logf("next grant %v after the kill (the holder's release: %v)", after.Round(time.Millisecond), relErr)
	if c.GrantWithin > 0 && after > c.GrantWithin {
		t.Errorf("the waiter was granted the key %v after the kill, beyond %v (the holder's release: %v)", after.Round(time.Millisecond), c.GrantWithin, relErr)
	}
	if r.l.Token() <= l.Token() {
		t.Errorf("token %d after the election, not greater than the holder's %d", r.l.Token(), l.Token())
	}
	if err := r.l.Release(ctx); err != nil {
		t.Errorf("Release after the election: %v", err)
	}
	restart()
	l2, err := c.Holder.Acquire(ctx, "wait", fence.WithWait(time.Minute))
	if err != nil {
		t.Fatalf("Acquire after the old leader came back: %v", err)
	}
	if l2.Token() <= r.l.Token() {
		t.Errorf("token %d after the old leader came back, not greater than %d", l2.Token(), r.l.Token())
	}
	_ = l2.Release(ctx)
}

func holder(ctx context.Context, t *testing.T, c Cluster) {
	l, err := c.Holder.Acquire(ctx, "hold")
	if err != nil {
		t.Fatal(err)
	}
	restart := c.KillLeader(t, "hold")
	defer restart()
	killed := time.Now()
	// Try all along: a grant while the holder still believes in its
	// lease is two holders at once. An election, and a store that then
	// expires the lost holder's key by its TTL, take seconds: the bound
	// is for liveness, far above them.
	var w *fence.Lease
	unavailable := 0
	cleaned := false
	for w == nil && time.Since(killed) < grantWithin && (l.Err() != nil || time.Since(killed) < keptAfter*c.TTL) {
		// A program releases a lease it lost, as Run and a deferred
		// Release do: on a session store the key stays held until then.
		if !cleaned && l.Err() != nil {
			cleaned = true
			t.Logf("the holder lost its lease %v after the kill (%v); its release: %v",
				time.Since(killed).Round(time.Millisecond), l.Err(), l.Release(ctx))
		}
		tctx, cancel := context.WithTimeout(ctx, c.TTL)
		w, err = c.Waiter.TryAcquire(tctx, "hold")
		timedOut := tctx.Err() != nil // the try's own deadline, in whatever words the store's client ends it
		cancel()
		switch {
		case err == nil:
			select {
			case <-l.Done():
			default:
				t.Fatalf("the key was granted (token %d) %v after the kill while its holder (token %d) still held it, valid for %v more",
					w.Token(), time.Since(killed).Round(time.Millisecond), l.Token(), l.ValidFor())
			}
			if !errors.Is(l.Err(), fence.ErrLost) {
				t.Errorf("the holder's lease ended with %v; want fence.ErrLost", l.Err())
			}
			t.Logf("the holder lost its lease during the election (%v); next grant %v after the kill",
				l.Err(), time.Since(killed).Round(time.Millisecond))
			if w.Token() <= l.Token() {
				t.Errorf("token %d after the election, not greater than the holder's %d", w.Token(), l.Token())
			}
			_ = w.Release(ctx)
		case errors.Is(err, fence.ErrHeld):
			time.Sleep(50 * time.Millisecond)
		case errors.Is(err, fence.ErrUnavailable), timedOut:
			unavailable++
			time.Sleep(50 * time.Millisecond)
		default:
			t.Fatalf("TryAcquire during the election: %v; want held, or an error matching fence.ErrUnavailable", err)
		}
	}
	if w != nil {
		return
	}
	if err := l.Err(); err != nil {
		t.Fatalf("the holder lost its lease (%v) but no contender got the key in %v", err, grantWithin)
	}
	t.Logf("the holder kept its lease through the election (%d tries unavailable)", unavailable)
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release after the election: %v", err)
	}
}
