package fenceredis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func redlockSetup(t *testing.T, n int) ([]*testserver.RedisServer, string, *raw) {
	srvs := testserver.Redises(t, n)
	connect := connectRedlock(srvs)
	return srvs, connect, newRaw(t, connect)
}

// The sequence of docs/design.md section 5's note: acquisitions that reach
// {A,B}, then {B,C}, then {A,C}. Counters are set far above the clock so
// that the time seed plays no part and only the counters decide.
func TestRedlockTokensTwoPhase(t *testing.T) {
	ctx := testCtx(t)
	_, connect, r := redlockSetup(t, 3)
	c := mustClient(t, mustOpen(t, connect), fence.WithTTL(2*time.Second))
	const base = 5_000_000_000_000_000 // µs in the year 2128; below 2^53
	n := lockNames(DefaultPrefix, "k")
	for _, s := range r.cs {
		if err := s.Set(ctx, n.counter, base, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if err := s.Set(ctx, "naive", base, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name  string
		reach [2]int
		clog  int
	}{{"{A,B}", [2]int{0, 1}, 2}, {"{B,C}", [2]int{1, 2}, 0}, {"{A,C}", [2]int{0, 2}, 1}}
	var tokens, naive []int64
	for _, step := range steps {
		// Another owner holds the lock on the third server only.
		clog := r.cs[step.clog]
		if err := clog.Set(ctx, n.lock, "someone-else", 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		l, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatalf("%s: TryAcquire with a quorum free: %v", step.name, err)
		}
		tokens = append(tokens, l.Token())
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		// The clogged server's refusal may still be on its way; let it
		// land before the clog goes, or it would be a grant.
		c.Driver().(*Redlock).running.Wait()
		if err := clog.Del(ctx, n.lock).Err(); err != nil {
			t.Fatal(err)
		}
		// What a single round would give: each reached server bumps its
		// own counter, and the token is the highest of the two.
		var m int64
		for _, i := range step.reach {
			m = max(m, r.cs[i].Incr(ctx, "naive").Val())
		}
		naive = append(naive, m)
	}
	t.Logf("two-phase tokens %v; single-round tokens %v", tokens, naive)
	want := []int64{base + 1, base + 2, base + 3}
	for i := range want {
		if tokens[i] != want[i] {
			t.Errorf("%s: token %d; want %d", steps[i].name, tokens[i], want[i])
		}
	}
	if naive[2] != naive[1] {
		t.Errorf("the single-round model gave %v; the sequence should have repeated a token", naive)
	}
}

// With one of three servers dead, a quorum remains: holders keep renewing,
// others still see the key held, and new leases and handoffs work.
func TestRedlockOneServerDead(t *testing.T) {
	ctx := testCtx(t)
	srvs, connect, r := redlockSetup(t, 3)
	const ttl = time.Second
	a := mustClient(t, mustOpen(t, connect), fence.WithTTL(ttl))
	b := mustClient(t, mustOpen(t, connect), fence.WithTTL(ttl))
	l, err := a.TryAcquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	// The acquisition returned with a quorum; it must still land on the
	// third server, or losing one of the quorum would lose the lease.
	n := lockNames(DefaultPrefix, "held")
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; i < len(r.cs); {
		if v := r.cs[i].Get(ctx, n.lock).Val(); ownerOf(v) == l.Owner() {
			i++
			continue
		}
		if time.Now().After(deadline) {
			t.Fatalf("lock not on server %d 5s after the acquisition", i)
		}
		time.Sleep(10 * time.Millisecond)
	}
	srvs[2].Kill()
	for range 6 {
		time.Sleep(ttl / 2)
		if err := l.Err(); err != nil {
			t.Fatalf("lease lost with two of three servers up: %v", err)
		}
	}
	if _, err := b.TryAcquire(ctx, "held"); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("TryAcquire of the held key with one server dead: %v; want ErrHeld", err)
	}
	l2, err := b.TryAcquire(ctx, "other")
	if err != nil {
		t.Fatalf("TryAcquire of a free key with one server dead: %v", err)
	}
	_ = l2.Release(ctx)

	got := make(chan *fence.Lease, 1)
	go func() {
		l3, err := b.Acquire(ctx, "held")
		if err != nil {
			t.Errorf("waiting Acquire: %v", err)
		}
		got <- l3
	}()
	time.Sleep(ttl / 4)
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with one server dead: %v", err)
	}
	select {
	case l3 := <-got:
		if l3 == nil {
			t.FailNow()
		}
		if l3.Token() <= l.Token() {
			t.Errorf("next holder's token %d is not above %d", l3.Token(), l.Token())
		}
		_ = l3.Release(ctx)
	case <-time.After(10 * time.Second):
		t.Fatal("waiter did not get the key after its release")
	}
}

// With two of three servers dead no quorum is left: current holders lose
// their leases, and acquisitions fail with ErrNoQuorum and
// fence.ErrUnavailable, not ErrHeld; a waiting Acquire waits for the
// servers until its wait ends. When the servers come back (empty), tokens
// go on increasing.
func TestRedlockTwoServersDead(t *testing.T) {
	ctx := testCtx(t)
	srvs, connect, _ := redlockSetup(t, 3)
	const ttl = time.Second
	a := mustClient(t, mustOpen(t, connect), fence.WithTTL(ttl))
	b := mustClient(t, mustOpen(t, connect), fence.WithTTL(ttl))
	l, err := a.TryAcquire(ctx, "held")
	if err != nil {
		t.Fatal(err)
	}
	srvs[1].Kill()
	srvs[2].Kill()
	killed := time.Now()
	select {
	case <-l.Done():
		t.Logf("holder lost its lease %v after two servers died: %v", time.Since(killed), l.Err())
	case <-time.After(ttl + 5*time.Second):
		t.Fatal("holder still believes it holds the lease with two of three servers dead")
	}
	if !errors.Is(l.Err(), fence.ErrLost) {
		t.Errorf("cause %v; want ErrLost", l.Err())
	}

	_, err = b.TryAcquire(ctx, "fresh")
	if !errors.Is(err, ErrNoQuorum) || !errors.Is(err, fence.ErrUnavailable) || errors.Is(err, fence.ErrHeld) {
		t.Fatalf("TryAcquire with two of three servers dead: %v; want ErrNoQuorum and ErrUnavailable, not ErrHeld", err)
	}
	if !strings.Contains(err.Error(), "1 of 3 servers agreed, 2 needed") {
		t.Errorf("error %q does not say how many servers agreed", err)
	}
	t.Logf("TryAcquire: %v", err)
	const wait = 3 * time.Second
	start := time.Now()
	_, err = b.Acquire(ctx, "fresh", fence.WithWait(wait))
	if !errors.Is(err, ErrNoQuorum) || !errors.Is(err, fence.ErrUnavailable) || errors.Is(err, fence.ErrHeld) {
		t.Errorf("waiting Acquire with two of three servers dead: %v; want ErrNoQuorum and ErrUnavailable, not ErrHeld", err)
	}
	if took := time.Since(start); took < wait {
		t.Errorf("waiting Acquire gave up after %v, before its wait of %v ended", took, wait)
	}
	t.Logf("waiting Acquire: %v", err)

	srvs[1].Restart()
	srvs[2].Restart()
	var l2 *fence.Lease
	deadline := time.Now().Add(20 * time.Second)
	for l2 == nil {
		l2, err = b.TryAcquire(ctx, "held")
		if err != nil && time.Now().After(deadline) {
			t.Fatalf("TryAcquire after the servers came back: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after two servers restarted empty is not above %d", l2.Token(), l.Token())
	}
	_ = l2.Release(ctx)
}

// Restarting servers empty, one at a time and all at once, never yields a
// lower token: each server seeds its proposals with its clock.
func TestRedlockTokensSurviveRestarts(t *testing.T) {
	ctx := testCtx(t)
	srvs, connect, _ := redlockSetup(t, 3)
	c := mustClient(t, mustOpen(t, connect), fence.WithTTL(2*time.Second))
	var last int64
	acquire := func(how string) {
		t.Helper()
		var l *fence.Lease
		var err error
		deadline := time.Now().Add(20 * time.Second)
		for l == nil {
			if l, err = c.TryAcquire(ctx, "k"); err != nil {
				if time.Now().After(deadline) {
					t.Fatalf("%s: %v", how, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
		}
		if l.Token() <= last {
			t.Errorf("%s: token %d is not above %d", how, l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Logf("%s: release: %v", how, err)
		}
	}
	acquire("first")
	for i, s := range srvs {
		s.Restart()
		acquire("after restarting server " + string(rune('A'+i)))
	}
	for _, s := range srvs {
		s.Kill()
	}
	for _, s := range srvs {
		s.Restart()
	}
	acquire("after restarting all servers")
}

// Extend needs a quorum: a lock deleted on one of three servers is still
// held; deleted on two it is lost at the next renewal, refused.
func TestRedlockExtendNeedsQuorum(t *testing.T) {
	ctx := testCtx(t)
	_, connect, r := redlockSetup(t, 3)
	c := mustClient(t, mustOpen(t, connect), fence.WithTTL(time.Second))
	l, err := c.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// The acquisition returns on a quorum; a slower server's call may
	// still be on its way, and would set the key again after the Del.
	running := &c.Driver().(*Redlock).running
	running.Wait()
	n := lockNames(DefaultPrefix, "k")
	if err := r.cs[0].Del(ctx, n.lock).Err(); err != nil {
		t.Fatal(err)
	}
	if err := l.Renew(ctx); err != nil {
		t.Fatalf("Renew with the lock on two of three servers: %v", err)
	}
	running.Wait()
	if err := r.cs[1].Del(ctx, n.lock).Err(); err != nil {
		t.Fatal(err)
	}
	err = l.Renew(ctx)
	var lost *fence.LostError
	if !errors.As(err, &lost) || lost.Reason != fence.LossRefused {
		t.Fatalf("Renew with the lock on one of three servers: %v; want a *LostError, refused", err)
	}
	if l.Err() == nil {
		t.Error("lease still valid after a refused renewal")
	}
}

// Paused servers (SIGSTOP: connections open, no answers): with one of
// three paused a quorum answers and acquisitions succeed; with two paused
// an acquisition fails once the TTL's validity is spent, never reporting a
// lease that a quorum did not grant in time.
func TestRedlockPausedServers(t *testing.T) {
	ctx := testCtx(t)
	srvs, connect, _ := redlockSetup(t, 3)
	const ttl = time.Second
	c := mustClient(t, mustOpen(t, connect), fence.WithTTL(ttl))
	// Open connections to every server first.
	l, err := c.TryAcquire(ctx, "warm")
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)

	srvs[0].Stop()
	l, err = c.TryAcquire(ctx, "one-paused")
	if err != nil {
		t.Fatalf("TryAcquire with one of three servers paused: %v", err)
	}
	_ = l.Release(ctx)

	srvs[1].Stop()
	start := time.Now()
	l, err = c.TryAcquire(ctx, "two-paused")
	took := time.Since(start)
	if err == nil {
		t.Fatalf("TryAcquire with two of three servers paused succeeded (token %d)", l.Token())
	}
	if !errors.Is(err, ErrNoQuorum) || !errors.Is(err, fence.ErrUnavailable) {
		t.Errorf("TryAcquire with two of three servers paused: %v; want ErrNoQuorum and ErrUnavailable", err)
	}
	t.Logf("failed after %v: %v", took, err)
	srvs[0].Cont()
	srvs[1].Cont()
}

// Inspect and List report the holder a quorum agrees on.
func TestRedlockInspectNeedsQuorum(t *testing.T) {
	ctx := testCtx(t)
	_, connect, r := redlockSetup(t, 3)
	c := mustClient(t, mustOpen(t, connect), fence.WithTTL(5*time.Second))
	n := lockNames(DefaultPrefix, "minority")
	if err := r.cs[0].Set(ctx, n.lock, "someone", 5*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Inspect(ctx, "minority"); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Inspect of a key held on one of three servers: %v; want ErrNotHeld", err)
	}
	if hs, err := c.List(ctx, "minority"); err != nil || len(hs) != 0 {
		t.Errorf("List of a key held on one of three servers: %v, %v; want none", hs, err)
	}
	// TryAcquire still gets it: two of three are free.
	l, err := c.TryAcquire(ctx, "minority")
	if err != nil {
		t.Fatal(err)
	}
	h, err := c.Inspect(ctx, "minority")
	if err != nil || h.Owner != l.Owner() || h.Token != l.Token() {
		t.Errorf("Inspect = %+v, %v; want owner %s token %d", h, err, l.Owner(), l.Token())
	}
	_ = l.Release(ctx)
}

// A server that grants an acquisition late, after the quorum did and the
// lease was already released, lets go at once instead of holding the key
// until the TTL. The third server's client delays every reservation, so
// it arrives after the release has been there.
func TestRedlockLateGrantAfterRelease(t *testing.T) {
	ctx := testCtx(t)
	srvs, _, r := redlockSetup(t, 3)
	var cs []redis.UniversalClient
	for _, srv := range srvs {
		cs = append(cs, newClient(srv.Addr()))
	}
	const lag = 300 * time.Millisecond
	cs[2].AddHook(delayScript{reserveScript.Hash(), lag})
	rl, err := NewRedlock(cs)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rl.Close()
		for _, c := range cs {
			c.Close()
		}
	})
	c := mustClient(t, rl, fence.WithTTL(time.Minute))
	n := lockNames(DefaultPrefix, "late")
	l, err := c.TryAcquire(ctx, "late")
	if err != nil {
		t.Fatalf("TryAcquire with two of three servers prompt: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(lag) // the late reservation lands
	deadline := time.Now().Add(10 * time.Second)
	for r.cs[2].Exists(ctx, n.lock).Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("the late server still holds the released lease %v after its grant (TTL 1m)", 10*time.Second)
		}
		time.Sleep(20 * time.Millisecond)
	}
	l2, err := c.TryAcquire(ctx, "late")
	if err != nil {
		t.Fatalf("TryAcquire after the release: %v", err)
	}
	_ = l2.Release(ctx)
}

// delayScript is a go-redis hook that holds back every EVALSHA of one
// script for a while before sending it.
type delayScript struct {
	sha   string
	delay time.Duration
}

func (h delayScript) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h delayScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) > 1 && args[0] == "evalsha" && args[1] == h.sha {
			time.Sleep(h.delay)
		}
		return next(ctx, cmd)
	}
}

func (h delayScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
