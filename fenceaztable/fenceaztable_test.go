package fenceaztable_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceaztable"
	"github.com/fencing/fence/internal/testkit/faultproxy"
)

const ttl = 2 * time.Second

func client(t *testing.T, connect string, opts ...fence.ClientOption) (*fenceaztable.Store, *fence.Client) {
	t.Helper()
	s := mustOpen(t, connect)
	c := fence.New(s, append([]fence.ClientOption{fence.WithTTL(ttl)}, opts...)...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("closing client: %v", err)
		}
	})
	return s, c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustTry(t *testing.T, ctx context.Context, c *fence.Client, key string, opts ...fence.AcquireOption) *fence.Lease {
	t.Helper()
	l, err := c.TryAcquire(ctx, key, opts...)
	if err != nil {
		t.Fatalf("TryAcquire(%.40q): %v", key, err)
	}
	return l
}

func req(key, owner string) fence.Request { return fence.Request{Key: key, Owner: owner, TTL: ttl} }

// TestExpiryOnOwnClock: a Store that comes to a key whose holder died
// long ago still waits a full TTL from its own first look before it takes
// the key: it trusts no clock but its own.
func TestExpiryOnOwnClock(t *testing.T) {
	ctx := testCtx(t)
	connect := server(t)
	_, a := client(t, connect)
	l := mustTry(t, ctx, a, "k", fence.WithoutRenewal())
	<-l.Done() // the holder stops renewing: its lease is over on its clock
	time.Sleep(ttl)

	fresh := mustOpen(t, connect)
	first := time.Now()
	_, err := fresh.TryAcquire(ctx, req("k", "owner-b"))
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Token != l.Token() ||
		held.Holder.ExpiresIn <= ttl-time.Second || held.Holder.ExpiresIn > ttl {
		t.Fatalf("first look at a dead holder's key: %v (holder %+v); want a *HeldError naming token %d, expiring in about %v",
			err, held, l.Token(), ttl)
	}
	var c fence.Claim
	for c == nil {
		time.Sleep(100 * time.Millisecond)
		c, err = fresh.TryAcquire(ctx, req("k", "owner-b"))
		if err != nil && !errors.Is(err, fence.ErrHeld) {
			t.Fatal(err)
		}
		if took := time.Since(first); c == nil && took > ttl+5*time.Second {
			t.Fatalf("key not taken %v after the first look", took)
		}
	}
	if took := time.Since(first); took < ttl {
		t.Errorf("key taken %v after the first look; want a full TTL (%v) of watching", took, ttl)
	}
	if c.Token() <= l.Token() {
		t.Errorf("token %d after the takeover is not greater than %d", c.Token(), l.Token())
	}
	if err := c.Release(ctx); err != nil {
		t.Error(err)
	}
}

// TestRenewalRestartsWatch: a renewal changes the entity's ETag, and a
// contender's watch starts again from its first look at the new one.
func TestRenewalRestartsWatch(t *testing.T) {
	ctx := testCtx(t)
	connect := server(t)
	s1, s2 := mustOpen(t, connect), mustOpen(t, connect)
	c1, err := s1.TryAcquire(ctx, req("k", "owner-a"))
	if err != nil {
		t.Fatal(err)
	}
	try := func(why string) (fence.Claim, error) {
		t.Helper()
		c, err := s2.TryAcquire(ctx, req("k", "owner-b"))
		if err != nil && !errors.Is(err, fence.ErrHeld) {
			t.Fatalf("%s: %v", why, err)
		}
		return c, err
	}
	if c, _ := try("first look"); c != nil {
		t.Fatal("key taken at the first look")
	}
	time.Sleep(ttl * 3 / 4)
	if err := c1.Extend(ctx, ttl); err != nil {
		t.Fatal(err)
	}
	time.Sleep(ttl * 3 / 4) // past a TTL from the first look
	seen := time.Now()
	if c, _ := try("a TTL after the first look, after a renewal"); c != nil {
		t.Fatal("key taken though its holder renewed within the contender's watch")
	}
	time.Sleep(ttl / 2)
	if c, _ := try("half a TTL after the first look at the renewal"); c != nil {
		t.Fatal("key taken half a TTL after the contender first saw the renewal")
	}
	var c2 fence.Claim
	for c2 == nil {
		time.Sleep(100 * time.Millisecond)
		c2, _ = try("polling")
		if time.Since(seen) > ttl+5*time.Second {
			t.Fatal("key never taken after its holder stopped renewing")
		}
	}
	if took := time.Since(seen); took < ttl {
		t.Errorf("key taken %v after the renewal was first seen; want a full TTL", took)
	}
	if err := c1.Extend(ctx, ttl); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Extend by the holder whose lease was taken: %v; want ErrNotHeld", err)
	}
	if err := c1.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Release by the holder whose lease was taken: %v; want ErrNotHeld", err)
	}
	if err := c2.Release(ctx); err != nil {
		t.Errorf("the new holder's Release after the old holder's: %v", err)
	}
}

// TestClaim drives the driver directly: a renewal or release refused
// matches ErrNotHeld and never touches another owner's lease.
func TestClaim(t *testing.T) {
	ctx := testCtx(t)
	connect := server(t)
	s, other := mustOpen(t, connect), mustOpen(t, connect)
	const key = "k"
	c1, err := s.TryAcquire(ctx, req(key, "owner-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.Extend(ctx, 3*ttl); err != nil {
		t.Errorf("Extend: %v", err)
	}
	_, err = other.TryAcquire(ctx, req(key, "owner-2"))
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Owner != "owner-1" || held.Holder.Token != c1.Token() ||
		held.Holder.ExpiresIn != 3*ttl {
		t.Errorf("TryAcquire of a held key: %v (holder %+v); want a *HeldError naming owner-1, token %d, expiring in %v",
			err, held, c1.Token(), 3*ttl)
	}
	if _, err := s.Break(ctx, key, c1.Token()+1); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("Break with another token: %v; want ErrHeld", err)
	}
	if _, err := s.Break(ctx, key, c1.Token()); err != nil {
		t.Fatalf("Break: %v", err)
	}
	if _, err := s.Break(ctx, key, 0); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Break of a free key: %v; want ErrNotHeld", err)
	}
	if err := c1.Extend(ctx, ttl); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Extend of a broken lease: %v; want ErrNotHeld", err)
	}
	c2, err := other.TryAcquire(ctx, req(key, "owner-2"))
	if err != nil {
		t.Fatalf("TryAcquire after the break: %v", err)
	}
	if c2.Token() <= c1.Token() {
		t.Errorf("token %d after a break is not greater than %d", c2.Token(), c1.Token())
	}
	if err := c1.Release(ctx); !errors.Is(err, fence.ErrNotHeld) || !strings.Contains(err.Error(), `"k"`) {
		t.Errorf("Release of the broken lease: %v; want ErrNotHeld naming the key", err)
	}
	if err := c2.Extend(ctx, ttl); err != nil {
		t.Errorf("the new holder's Extend after the old holder's Release: %v", err)
	}
	if err := c2.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
	if err := c2.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("second Release: %v; want ErrNotHeld", err)
	}
	if _, err := s.Inspect(ctx, key); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Inspect after release: %v; want ErrNotHeld", err)
	}
}

// TestTokensSurviveDeletedEntity: an entity deleted or stripped of its
// counter behind fence's back (an operator, a script) restarts its counter
// from the store's clock, above every earlier token.
func TestTokensSurviveDeletedEntity(t *testing.T) {
	ctx := testCtx(t)
	s, c := client(t, server(t))
	const key = "k"
	var last int64
	next := func(how string) {
		t.Helper()
		l := mustTry(t, ctx, c, key)
		if l.Token() <= last {
			t.Errorf("%s: token %d is not greater than %d", how, l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Error(err)
		}
	}
	next("first")
	next("second")
	// The one assumption: the counter is not lost within the second it
	// was last written (the seed's resolution is a second).
	time.Sleep(1100 * time.Millisecond)
	if _, err := s.Table().DeleteEntity(ctx, fenceaztable.PartitionKey(key), "lock", nil); err != nil {
		t.Fatal(err)
	}
	next("after the entity was deleted")
	next("then")
	time.Sleep(1100 * time.Millisecond)
	stripped := `{"PartitionKey":"` + fenceaztable.PartitionKey(key) + `","RowKey":"lock","Key":"k","Other":"x"}`
	if _, err := s.Table().UpsertEntity(ctx, []byte(stripped), &aztables.UpsertEntityOptions{UpdateMode: aztables.UpdateModeReplace}); err != nil {
		t.Fatal(err)
	}
	next("after the entity was overwritten without its counter")
	next("then")
}

// Tests that set the hook must not run in parallel with others: it is
// global.

// TestLostRaceBeforeWrite: another acquisition takes and releases the key
// between an acquisition's read and its write. The write, If-Match on the
// ETag read, is refused; the acquisition reads again and issues a greater
// token, never the same one.
func TestLostRaceBeforeWrite(t *testing.T) {
	ctx := testCtx(t)
	connect := server(t)
	_, a := client(t, connect)
	_, b := client(t, connect)
	const key = "k"
	// The entity exists: the race is on the replace, not the insert.
	l0 := mustTry(t, ctx, a, key)
	if err := l0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var competitor int64
	reads := 0
	defer fenceaztable.SetTestHook(func(string) {
		reads++
		if reads != 1 {
			return
		}
		l := mustTry(t, ctx, b, key)
		competitor = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Error(err)
		}
	})()
	l := mustTry(t, ctx, a, key)
	if competitor == 0 {
		t.Fatal("the competing acquisition did not run")
	}
	if reads != 3 {
		t.Errorf("%d reads; want 3 (the first attempt's, the competitor's, the retry's)", reads)
	}
	if l.Token() <= competitor {
		t.Errorf("token %d, issued after a competitor's %d, is not greater", l.Token(), competitor)
	}
	if err := l.Release(ctx); err != nil {
		t.Error(err)
	}
}

// TestLostInsertRace: two first acquisitions of a key race to insert its
// entity; the second insert is refused, and its acquisition finds the key
// held.
func TestLostInsertRace(t *testing.T) {
	ctx := testCtx(t)
	connect := server(t)
	_, a := client(t, connect)
	_, b := client(t, connect)
	const key = "k"
	var winner *fence.Lease
	reads := 0
	defer fenceaztable.SetTestHook(func(string) {
		reads++
		if reads == 1 {
			winner = mustTry(t, ctx, b, key)
		}
	})()
	_, err := a.TryAcquire(ctx, key)
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Token != winner.Token() {
		t.Errorf("TryAcquire that lost the insert: %v; want a *HeldError naming token %d", err, winner.Token())
	}
	if err := winner.Release(ctx); err != nil {
		t.Error(err)
	}
}

func TestMetadataTooLarge(t *testing.T) {
	ctx := testCtx(t)
	s, c := client(t, server(t))
	big := map[string]string{"big": strings.Repeat("x", 40000)}
	if _, err := c.TryAcquire(ctx, "k", fence.WithMetadata(big)); !errors.Is(err, fence.ErrInvalidOption) {
		t.Errorf("TryAcquire with 40000 bytes of metadata: %v; want ErrInvalidOption", err)
	}
	// Nothing was sent: the table was not even made.
	_, err := s.Table().NewListEntitiesPager(nil).NextPage(ctx)
	if err == nil || !strings.Contains(err.Error(), string(aztables.TableNotFound)) {
		t.Errorf("listing the table after a refused acquisition: %v; want TableNotFound", err)
	}
}

// TestPausedHolderRefusedByGuard is the classic scenario end to end: a
// holder stops (its process paused: its work and its renewals), a
// contender takes the key once the holder's entity has not changed for a
// TTL, and writes with its token; the holder resumes and writes with its
// old token, and the guard refuses it.
func TestPausedHolderRefusedByGuard(t *testing.T) {
	ctx := testCtx(t)
	connect, az := serverProcess(t)
	proxy, err := faultproxy.New(az.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	_, a := client(t, strings.Replace(connect, az.Addr(), proxy.Addr(), 1))
	_, b := client(t, connect)
	const key, resource = "invoices", "invoice-42"
	var guard fence.MemoryGuard
	doc := ""
	write := func(l *fence.Lease, token int64, v string) error {
		return guard.Do(ctx, resource, token, func() error { doc = v; return nil })
	}

	la := mustTry(t, ctx, a, key)
	staleToken := la.Token()
	if err := write(la, staleToken, "from A"); err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole(faultproxy.Both) // A pauses: nothing of it reaches the store
	paused := time.Now()

	lb, err := b.Acquire(ctx, key, fence.WithWait(ttl+10*time.Second))
	if err != nil {
		t.Fatalf("Acquire while the holder is paused: %v", err)
	}
	t.Logf("key taken %v after the holder paused", time.Since(paused))
	select {
	case <-la.Done():
	default:
		t.Error("the new holder got the key while the paused holder's lease was still valid locally")
	}
	if lb.Token() <= staleToken {
		t.Fatalf("new token %d is not greater than the paused holder's %d", lb.Token(), staleToken)
	}
	if err := write(lb, lb.Token(), "from B"); err != nil {
		t.Fatalf("the new holder's write: %v", err)
	}

	proxy.Heal() // A resumes, and writes with the token it has
	err = write(la, staleToken, "from A, late")
	var stale *fence.StaleError
	if !errors.As(err, &stale) || stale.Token != staleToken || stale.Highest != lb.Token() {
		t.Errorf("the resumed holder's write: %v; want a *fence.StaleError for token %d below %d", err, staleToken, lb.Token())
	}
	if doc != "from B" {
		t.Errorf("document = %q; the stale write got through", doc)
	}
	if err := la.Release(ctx); !errors.Is(err, fence.ErrLost) {
		t.Errorf("Release by the resumed holder: %v; want ErrLost", err)
	}
	if err := lb.Renew(ctx); err != nil {
		t.Errorf("the new holder's Renew after the old holder's Release: %v", err)
	}
	if err := lb.Release(ctx); err != nil {
		t.Error(err)
	}
}

// TestTokensAcrossRestart: Azurite writes its state to disk every few
// seconds; once it has, tokens keep growing across a kill and restart.
func TestTokensAcrossRestart(t *testing.T) {
	ctx := testCtx(t)
	connect, az := serverProcess(t)
	_, c := client(t, connect)
	var last int64
	for range 3 {
		l := mustTry(t, ctx, c, "k")
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(6 * time.Second) // Azurite's autosave interval is 5 s
	az.Kill()
	az.Restart()
	l := mustTry(t, ctx, c, "k")
	if l.Token() <= last {
		t.Errorf("token %d after a restart is not greater than %d", l.Token(), last)
	}
	if err := l.Release(ctx); err != nil {
		t.Error(err)
	}
}

// TestCancelledAcquireLeavesNothing: an acquisition cancelled between its
// read and its write, and one whose write landed but whose answer never
// came back before it was cancelled, leave the key free at once, not
// held for a TTL.
func TestCancelledAcquireLeavesNothing(t *testing.T) {
	ctx := testCtx(t)
	connect, az := serverProcess(t)
	proxy, err := faultproxy.New(az.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	a := mustOpen(t, strings.Replace(connect, az.Addr(), proxy.Addr(), 1))
	b := mustOpen(t, connect)
	const key = "k"
	// The entity exists: both cases are a replace.
	c0, err := b.TryAcquire(ctx, req(key, "owner-0"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	last := c0.Token()
	for _, landed := range []bool{false, true} {
		actx, cancel := context.WithCancel(ctx)
		restore := fenceaztable.SetTestHook(func(string) {
			if !landed {
				cancel()
				return
			}
			// The write goes through; its answer is held until after
			// the caller has given up.
			proxy.Blackhole(faultproxy.Downstream)
			time.AfterFunc(300*time.Millisecond, cancel)
			time.AfterFunc(time.Second, proxy.Heal)
		})
		_, err := a.TryAcquire(actx, req(key, "owner-a"))
		restore()
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("landed %v: TryAcquire cancelled: %v; want context.Canceled", landed, err)
		}
		c, err := b.TryAcquire(ctx, req(key, "owner-b"))
		if err != nil {
			t.Fatalf("landed %v: TryAcquire after a cancelled acquisition: %v; it left the key held", landed, err)
		}
		if c.Token() <= last {
			t.Errorf("landed %v: token %d after %d", landed, c.Token(), last)
		}
		last = c.Token()
		if err := c.Release(ctx); err != nil {
			t.Error(err)
		}
	}
}

// TestRetriedWriteThatLanded: the answer to a write is lost after the
// write landed (the connection reset), the SDK sends it again, and the
// service refuses the second one (the ETag has changed: by the first).
// The driver reads the entity back, sees its own write, and goes on: the
// acquisition is granted, and a renewal's new ETag is adopted, so later
// renewals and the release still work.
func TestRetriedWriteThatLanded(t *testing.T) {
	ctx := testCtx(t)
	connect, az := serverProcess(t)
	proxy, err := faultproxy.New(az.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	a := mustOpen(t, strings.Replace(connect, az.Addr(), proxy.Addr(), 1))
	b := mustOpen(t, connect)
	const key = "k"
	c0, err := b.TryAcquire(ctx, req(key, "owner-0"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// loseAnswer holds every answer from now on, then resets the
	// connections once the write has surely landed.
	loseAnswer := func() {
		proxy.Blackhole(faultproxy.Downstream)
		time.AfterFunc(500*time.Millisecond, func() { proxy.Reset(); proxy.Heal() })
	}
	restore := fenceaztable.SetTestHook(func(string) { loseAnswer() })
	c, err := a.TryAcquire(ctx, req(key, "owner-a"))
	restore()
	if err != nil {
		t.Fatalf("TryAcquire whose write landed but whose answer was lost: %v", err)
	}
	if c.Token() <= c0.Token() {
		t.Errorf("token %d after %d", c.Token(), c0.Token())
	}
	if _, err := b.TryAcquire(ctx, req(key, "owner-b")); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("TryAcquire of the key just granted: %v; want ErrHeld", err)
	}
	loseAnswer()
	if err := c.Extend(ctx, ttl); err != nil {
		t.Fatalf("Extend whose answer was lost: %v", err)
	}
	if err := c.Extend(ctx, ttl); err != nil {
		t.Errorf("the next Extend: %v; the driver did not adopt the landed write's ETag", err)
	}
	loseAnswer()
	if err := c.Release(ctx); err != nil {
		t.Errorf("Release whose answer was lost: %v", err)
	}
	c2, err := b.TryAcquire(ctx, req(key, "owner-b"))
	if err != nil {
		t.Fatalf("TryAcquire after the release: %v", err)
	}
	if err := c2.Release(ctx); err != nil {
		t.Error(err)
	}
}
