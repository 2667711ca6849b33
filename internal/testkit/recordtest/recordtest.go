// Package recordtest is the shared test suite of the record-version stores
// (fenceaztable, fencedynamo): one record per key, written only on
// condition of the record version read, expiry judged on the reader's own
// clock by internal/kit/sighting, and a token counter in the record seeded
// from the service's Date. Each store's tests fill in a Harness and call
// Run, Conformance and, where the store has broken modes to show the
// suite catching, list them in Harness.Mutants.
package recordtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencetest"
	"github.com/fencing/fence/internal/testkit/faultproxy"
)

// Store is what the suite needs of a record-version store.
type Store interface {
	fence.Driver
	fence.Inspector
	fence.Lister
	fence.Breaker // frees a key behind its holder's back, as an operator would
}

// Process is the private server a test runs against.
type Process interface {
	Addr() string // host:port, as it appears in the connect string
	Kill()
	Restart()
	Start() error // after Kill: start it again on its data, on its port
}

// Harness describes one record-version store to the suite.
type Harness[S Store] struct {
	// TTL is the lease TTL of the tests.
	TTL time.Duration
	// Record and Version are the store's words, for messages, for a key's
	// record ("entity", "item") and its version ("ETag", "record
	// version").
	Record, Version string
	// Server starts a private server and returns the connect string of a
	// new table on it, not created yet, and the server.
	Server func(t *testing.T) (connect string, p Process)
	// Open opens a Store from a connect string made by Server, creating
	// the table when first used: its own client with its own connections,
	// which close closes.
	Open func(connect string) (s S, close func() error, err error)
	// Delete deletes key's record behind fence's back, counter and all.
	Delete func(ctx context.Context, s S, key string) error
	// Strip overwrites key's record behind fence's back with one that has
	// no counter (nor holder).
	Strip func(ctx context.Context, s S, key string) error
	// SetTestHook is the store's SetTestHook: afterRead is called after
	// an acquisition reads the record, before it writes.
	SetTestHook func(afterRead func(key string)) (restore func())
	// SetSettleTimeout is the store's SetSettleTimeout: how long the read
	// that settles a write whose answer was lost may take.
	SetSettleTimeout func(d time.Duration) (restore func())
	// SetDelayMutant is the store's SetDelayMutant: it breaks the
	// lock-delay of every Store the way mutant names ("ignore-delay",
	// "release-after-end", "resume-in-delay"), until restore is called.
	SetDelayMutant func(mutant string) (restore func())
	// MetadataTooLarge is a size of metadata, in bytes, that the store
	// refuses before it sends anything.
	MetadataTooLarge int
	// NoTable returns nil if s's table does not exist, and an error
	// saying what it found otherwise.
	NoTable func(ctx context.Context, s S) error
	// Persisted is how long the server may take to write what it was
	// told to disk; Kill comes that long after the last write.
	Persisted time.Duration
	// Mutants are broken modes of the store, each with the tests that must
	// catch it; the suite's Mutants test runs them, and the suite's own
	// mutants of the harness. Optional.
	Mutants map[string]Mutant[S]
}

// Mutant is a broken mode of a store, or of a harness.
type Mutant[S Store] struct {
	// Set breaks every Store of the process, or h, until restore is
	// called.
	Set func(h *Harness[S]) (restore func())
	// Catch names the tests of Run that must fail, and Why a piece of
	// the message one of them must fail with: the reason meant, not
	// another.
	Catch []string
	Why   string
}

const envMutant = "RECORDTEST_MUTANT"

// Run runs the suite's tests against the store h describes, each a
// subtest, and the Mutants test that shows, each in a child process, the
// tests catching h.Mutants and the suite's own mutants of the harness.
// Tests that set the store's test hook must not run in parallel with
// others: it is global.
func Run[S Store](t *testing.T, h Harness[S]) {
	if name := os.Getenv(envMutant); name != "" {
		m, ok := mutants(t, h)[name]
		if !ok {
			t.Fatalf("%s=%s: no such mutant", envMutant, name)
		}
		t.Cleanup(m.Set(&h))
	}
	x := &suite[S]{Harness: h}
	t.Run("ExpiryOnOwnClock", x.expiryOnOwnClock)
	t.Run("RenewalRestartsWatch", x.renewalRestartsWatch)
	t.Run("Claim", x.claim)
	t.Run(tokensSurviveDeleted(h), x.tokensSurviveDeleted)
	t.Run("LostRaceBeforeWrite", x.lostRaceBeforeWrite)
	t.Run("LostInsertRace", x.lostInsertRace)
	t.Run("MetadataTooLarge", x.metadataTooLarge)
	t.Run("PausedHolderRefusedByGuard", x.pausedHolderRefusedByGuard)
	t.Run("TokensAcrossRestart", x.tokensAcrossRestart)
	t.Run("CancelledAcquireLeavesNothing", x.cancelledAcquireLeavesNothing)
	t.Run("RetriedWriteThatLanded", x.retriedWriteThatLanded)
	t.Run("UnsettledWriteThatLanded", x.unsettledWriteThatLanded)
	t.Run("LockDelayAfterWatch", x.lockDelayAfterWatch)
	if os.Getenv(envMutant) == "" {
		name := t.Name()
		t.Run("Mutants", func(t *testing.T) { catchMutants(t, name, mutants(t, h)) })
	}
}

// Conformance runs fencetest's suite against the store h describes.
// Store.Delete frees the key behind its holder's back (Break), as an
// operator would; Wipe deletes the record, counter and all. The lease is
// bound to no session: no KillSession.
func Conformance[S Store](t *testing.T, h Harness[S]) {
	fencetest.Run(t, fencetest.Config{
		TTL:            h.TTL,
		ContenderClock: true,
		Setup: func(t *testing.T) fencetest.Store {
			connect, p := h.Server(t)
			s := mustOpen(t, h, connect)
			return fencetest.Store{
				// The server killed: connections refused. Started again on
				// its data, so tokens grow across it.
				Outage: func(t *testing.T) func() {
					p.Kill()
					return func() {
						if err := p.Start(); err != nil {
							t.Fatalf("restart the server after the outage: %v", err)
						}
					}
				},
				Connect: connect,
				Delete: func(ctx context.Context, key string) error {
					_, err := s.Break(ctx, key, 0)
					return err
				},
				// The record goes, and its counter with it. The seed has a
				// resolution of a second, and assumes (the store's doc
				// page) that a counter is not lost within the second it
				// was last written: wait that out first.
				Wipe: func(ctx context.Context, key string) error {
					time.Sleep(1100 * time.Millisecond)
					return h.Delete(ctx, s, key)
				},
				// Records stay (they are the counters); what must not
				// stay is a holder.
				Leftovers: func(ctx context.Context, prefix string) ([]string, error) {
					hs, err := s.List(ctx, prefix)
					var left []string
					for _, h := range hs {
						left = append(left, "held: "+h.Key)
					}
					return left, err
				},
			}
		},
		Open: func(connect string) (fence.Driver, func() error, error) {
			return h.Open(connect)
		},
	})
}

type suite[S Store] struct{ Harness[S] }

func mustOpen[S Store](t *testing.T, h Harness[S], connect string) S {
	t.Helper()
	s, closeFn, err := h.Open(connect)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closeFn() })
	return s
}

func (x *suite[S]) open(t *testing.T, connect string) S {
	t.Helper()
	return mustOpen(t, x.Harness, connect)
}

func (x *suite[S]) server(t *testing.T) string {
	t.Helper()
	connect, _ := x.Server(t)
	return connect
}

// proxied starts a server and a fault proxy in front of it, and returns
// the connect strings through the proxy and straight to the server.
func (x *suite[S]) proxied(t *testing.T) (viaProxy, direct string, proxy *faultproxy.Proxy) {
	t.Helper()
	connect, p := x.Server(t)
	proxy, err := faultproxy.New(p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	return strings.Replace(connect, p.Addr(), proxy.Addr(), 1), connect, proxy
}

func (x *suite[S]) client(t *testing.T, connect string) (S, *fence.Client) {
	t.Helper()
	s := x.open(t, connect)
	c := fence.New(s, fence.WithTTL(x.TTL))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("closing client: %v", err)
		}
	})
	return s, c
}

func (x *suite[S]) req(key, owner string) fence.Request {
	return fence.Request{Key: key, Owner: owner, TTL: x.TTL}
}

// written takes and releases key with s, so that its record exists, and
// returns the token.
func (x *suite[S]) written(t *testing.T, ctx context.Context, s S, key string) int64 {
	t.Helper()
	c, err := s.TryAcquire(ctx, x.req(key, "owner-0"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	return c.Token()
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

// expiryOnOwnClock: a Store that comes to a key whose holder died long
// ago still waits a full TTL from its own first look before it takes the
// key: it trusts no clock but its own.
func (x *suite[S]) expiryOnOwnClock(t *testing.T) {
	ctx, ttl := testCtx(t), x.TTL
	connect := x.server(t)
	_, a := x.client(t, connect)
	l := mustTry(t, ctx, a, "k", fence.WithoutRenewal())
	<-l.Done() // the holder stops renewing: its lease is over on its clock
	time.Sleep(ttl)

	fresh := x.open(t, connect)
	first := time.Now()
	_, err := fresh.TryAcquire(ctx, x.req("k", "owner-b"))
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Token != l.Token() ||
		held.Holder.ExpiresIn <= ttl-time.Second || held.Holder.ExpiresIn > ttl {
		t.Fatalf("first look at a dead holder's key: %v (holder %+v); want a *HeldError naming token %d, expiring in about %v",
			err, held, l.Token(), ttl)
	}
	var c fence.Claim
	for c == nil {
		time.Sleep(100 * time.Millisecond)
		c, err = fresh.TryAcquire(ctx, x.req("k", "owner-b"))
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

// renewalRestartsWatch: a renewal changes the record's version, and a
// contender's watch starts again from its first look at the new one.
func (x *suite[S]) renewalRestartsWatch(t *testing.T) {
	ctx, ttl := testCtx(t), x.TTL
	connect := x.server(t)
	s1, s2 := x.open(t, connect), x.open(t, connect)
	c1, err := s1.TryAcquire(ctx, x.req("k", "owner-a"))
	if err != nil {
		t.Fatal(err)
	}
	try := func(why string) (fence.Claim, error) {
		t.Helper()
		c, err := s2.TryAcquire(ctx, x.req("k", "owner-b"))
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

// claim drives the driver directly: a renewal or release refused matches
// ErrNotHeld and never touches another owner's lease.
func (x *suite[S]) claim(t *testing.T) {
	ctx, ttl := testCtx(t), x.TTL
	connect := x.server(t)
	s, other := x.open(t, connect), x.open(t, connect)
	const key = "k"
	c1, err := s.TryAcquire(ctx, x.req(key, "owner-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.Extend(ctx, 3*ttl); err != nil {
		t.Errorf("Extend: %v", err)
	}
	_, err = other.TryAcquire(ctx, x.req(key, "owner-2"))
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
	c2, err := other.TryAcquire(ctx, x.req(key, "owner-2"))
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

// tokensSurviveDeleted: a record deleted or stripped of its counter
// behind fence's back (an operator, a script) restarts its counter from
// the store's clock, above every earlier token. A lease is held on the
// record when it goes, and its renewal is refused: the record did go.
func (x *suite[S]) tokensSurviveDeleted(t *testing.T) {
	ctx := testCtx(t)
	s, c := x.client(t, x.server(t))
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
	gone := func(how string, do func(ctx context.Context, s S, key string) error) {
		t.Helper()
		held, err := s.TryAcquire(ctx, x.req(key, "owner-held"))
		if err != nil {
			t.Fatal(err)
		}
		if held.Token() <= last {
			t.Errorf("before the %s was %s: token %d is not greater than %d", x.Record, how, held.Token(), last)
		}
		last = held.Token()
		// The one assumption: the counter is not lost within the second
		// it was last written (the seed's resolution is a second).
		time.Sleep(1100 * time.Millisecond)
		if err := do(ctx, s, key); err != nil {
			t.Fatal(err)
		}
		if err := held.Extend(ctx, x.TTL); !errors.Is(err, fence.ErrNotHeld) {
			t.Errorf("Extend of the lease whose %s was %s: %v; want ErrNotHeld", x.Record, how, err)
		}
		next(fmt.Sprintf("after the %s was %s", x.Record, how))
	}
	next("first")
	next("second")
	gone("deleted", x.Delete)
	next("then")
	gone("overwritten without its counter", x.Strip)
	next("then")
}

// lostRaceBeforeWrite: another acquisition takes and releases the key
// between an acquisition's read and its write. The write, conditional on
// the version read, is refused; the acquisition reads again and issues a
// greater token, never the same one.
func (x *suite[S]) lostRaceBeforeWrite(t *testing.T) {
	ctx := testCtx(t)
	connect := x.server(t)
	_, a := x.client(t, connect)
	_, b := x.client(t, connect)
	const key = "k"
	// The record exists: the race is on the replace, not the insert.
	l0 := mustTry(t, ctx, a, key)
	if err := l0.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var competitor int64
	reads := 0
	defer x.SetTestHook(func(string) {
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

// lostInsertRace: two first acquisitions of a key race to insert its
// record; the second insert is refused, and its acquisition finds the key
// held.
func (x *suite[S]) lostInsertRace(t *testing.T) {
	ctx := testCtx(t)
	connect := x.server(t)
	_, a := x.client(t, connect)
	_, b := x.client(t, connect)
	const key = "k"
	var winner *fence.Lease
	reads := 0
	defer x.SetTestHook(func(string) {
		reads++
		if reads == 1 {
			winner = mustTry(t, ctx, b, key)
		}
	})()
	_, err := a.TryAcquire(ctx, key)
	if winner == nil {
		t.Fatalf("the competing insert did not run (TryAcquire: %v)", err)
	}
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Token != winner.Token() {
		t.Errorf("TryAcquire that lost the insert of the %s: %v; want a *HeldError naming token %d", x.Record, err, winner.Token())
	}
	if err := winner.Release(ctx); err != nil {
		t.Error(err)
	}
}

// metadataTooLarge: metadata the store cannot hold is refused before
// anything is sent.
func (x *suite[S]) metadataTooLarge(t *testing.T) {
	ctx := testCtx(t)
	s, c := x.client(t, x.server(t))
	big := map[string]string{"big": strings.Repeat("x", x.MetadataTooLarge)}
	if _, err := c.TryAcquire(ctx, "k", fence.WithMetadata(big)); !errors.Is(err, fence.ErrInvalidOption) {
		t.Errorf("TryAcquire with %d bytes of metadata: %v; want ErrInvalidOption", x.MetadataTooLarge, err)
	}
	// Nothing was sent: the table was not even made.
	if err := x.NoTable(ctx, s); err != nil {
		t.Errorf("after a refused acquisition: %v", err)
	}
}

// pausedHolderRefusedByGuard is the classic scenario end to end: a holder
// stops (its process paused: its work and its renewals), a contender
// takes the key once the holder's record has not changed for a TTL, and
// writes with its token; the holder resumes and writes with its old
// token, and the guard refuses it.
func (x *suite[S]) pausedHolderRefusedByGuard(t *testing.T) {
	ctx, ttl := testCtx(t), x.TTL
	viaProxy, connect, proxy := x.proxied(t)
	_, a := x.client(t, viaProxy)
	_, b := x.client(t, connect)
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

// tokensAcrossRestart: once the server has written its state to disk,
// tokens keep growing across a kill and restart.
func (x *suite[S]) tokensAcrossRestart(t *testing.T) {
	ctx := testCtx(t)
	connect, p := x.Server(t)
	_, c := x.client(t, connect)
	var last int64
	for range 3 {
		l := mustTry(t, ctx, c, "k")
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(x.Persisted)
	p.Kill()
	p.Restart()
	l := mustTry(t, ctx, c, "k")
	if l.Token() <= last {
		t.Errorf("token %d after a restart is not greater than %d", l.Token(), last)
	}
	if err := l.Release(ctx); err != nil {
		t.Error(err)
	}
}

// cancelledAcquireLeavesNothing: an acquisition cancelled between its
// read and its write, and one whose write landed but whose answer never
// came back before it was cancelled, leave the key free at once, not held
// for a TTL.
func (x *suite[S]) cancelledAcquireLeavesNothing(t *testing.T) {
	ctx := testCtx(t)
	viaProxy, connect, proxy := x.proxied(t)
	a, b := x.open(t, viaProxy), x.open(t, connect)
	const key = "k"
	last := x.written(t, ctx, b, key) // both cases are a replace
	for _, landed := range []bool{false, true} {
		actx, cancel := context.WithCancel(ctx)
		hooked := false
		restore := x.SetTestHook(func(string) {
			hooked = true
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
		_, err := a.TryAcquire(actx, x.req(key, "owner-a"))
		restore()
		cancel()
		if !hooked {
			t.Fatalf("landed %v: the test hook did not run: nothing was cancelled", landed)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("landed %v: TryAcquire cancelled: %v; want context.Canceled", landed, err)
		}
		c, err := b.TryAcquire(ctx, x.req(key, "owner-b"))
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

// retriedWriteThatLanded: the answer to a write is lost after the write
// landed (the connection reset), the SDK sends it again, and the service
// refuses the second one (the version has changed: by the first). The
// driver reads the record back, sees its own write, and goes on: the
// acquisition is granted, and a renewal's new version is adopted, so
// later renewals and the release still work.
func (x *suite[S]) retriedWriteThatLanded(t *testing.T) {
	ctx, ttl := testCtx(t), x.TTL
	viaProxy, connect, proxy := x.proxied(t)
	a, b := x.open(t, viaProxy), x.open(t, connect)
	const key = "k"
	last := x.written(t, ctx, b, key)
	// loseAnswer holds every answer from now on, then resets the
	// connections once the write has surely landed.
	loseAnswer := func() {
		proxy.Blackhole(faultproxy.Downstream)
		time.AfterFunc(500*time.Millisecond, func() { proxy.Reset(); proxy.Heal() })
	}
	hooked := false
	restore := x.SetTestHook(func(string) { hooked = true; loseAnswer() })
	c, err := a.TryAcquire(ctx, x.req(key, "owner-a"))
	restore()
	if !hooked {
		t.Fatal("the test hook did not run: no answer was lost")
	}
	if err != nil {
		t.Fatalf("TryAcquire whose write landed but whose answer was lost: %v", err)
	}
	if c.Token() <= last {
		t.Errorf("token %d after %d", c.Token(), last)
	}
	if _, err := b.TryAcquire(ctx, x.req(key, "owner-b")); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("TryAcquire of the key just granted: %v; want ErrHeld", err)
	}
	loseAnswer()
	if err := c.Extend(ctx, ttl); err != nil {
		t.Fatalf("Extend whose answer was lost: %v", err)
	}
	if err := c.Extend(ctx, ttl); err != nil {
		t.Errorf("the next Extend: %v; the driver did not adopt the landed write's %s", err, x.Version)
	}
	loseAnswer()
	if err := c.Release(ctx); err != nil {
		t.Errorf("Release whose answer was lost: %v", err)
	}
	c2, err := b.TryAcquire(ctx, x.req(key, "owner-b"))
	if err != nil {
		t.Fatalf("TryAcquire after the release: %v", err)
	}
	if err := c2.Release(ctx); err != nil {
		t.Error(err)
	}
}

// unsettledWriteThatLanded: a renewal lands, but its answer is lost and
// the store stays unreachable past the read that would settle it, so the
// renewal fails without knowing it landed: the record has a version the
// holder never saw. The holder's next renewal must not take that for
// loss: the record still names its owner and token, nobody else wrote
// it. (A driver that trusted only the version it saw lost the lease here,
// in a healthy store.)
func (x *suite[S]) unsettledWriteThatLanded(t *testing.T) {
	ctx, ttl := testCtx(t), x.TTL
	viaProxy, connect, proxy := x.proxied(t)
	a, b := x.open(t, viaProxy), x.open(t, connect)
	const key = "k"
	c, err := a.TryAcquire(ctx, x.req(key, "owner-a"))
	if err != nil {
		t.Fatal(err)
	}
	defer x.SetSettleTimeout(200 * time.Millisecond)()
	proxy.Blackhole(faultproxy.Downstream) // the requests go through, no answer comes back
	short, cancel := context.WithTimeout(ctx, time.Second)
	err = c.Extend(short, ttl)
	cancel()
	if err == nil || errors.Is(err, fence.ErrNotHeld) {
		t.Fatalf("Extend whose answer never came: %v; want an error that is not ErrNotHeld", err)
	}
	// Did it land? The store's own view, not through the proxy.
	h, err := b.Inspect(ctx, key)
	if err != nil || h.Owner != "owner-a" || h.Token != c.Token() {
		t.Fatalf("Inspect after the unanswered Extend: %+v, %v; want owner-a's lease", h, err)
	}
	proxy.Reset()
	proxy.Heal()
	if err := c.Extend(ctx, ttl); err != nil {
		t.Fatalf("Extend after an unanswered Extend that landed: %v; the record still names the holder", err)
	}
	if _, err := b.TryAcquire(ctx, x.req(key, "owner-b")); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("TryAcquire of the held key: %v; want ErrHeld", err)
	}
	if err := c.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// lockDelayAfterWatch is LockDelayAfterWatch on two Stores of one table.
func (x *suite[S]) lockDelayAfterWatch(t *testing.T) {
	connect := x.server(t)
	LockDelayAfterWatch(t, x.open(t, connect), x.open(t, connect), x.TTL, x.TTL, x.Record)
}

// Watcher is a driver that judges expiry by watching a key's record and
// can show its holder.
type Watcher interface {
	fence.Driver
	fence.Inspector
}

// LockDelayAfterWatch checks the lock-delay of a record-version store
// (here s and other, two drivers on one store, each with its own watch):
// a lease with a lock-delay that ends without a release keeps its key
// from a contender that has watched its record for the whole TTL, until
// the delay has run too; meanwhile the contender's Inspect shows the lost
// holder, and the lost holder can neither release the key (lifting the
// delay), renew nor resume its lease. ttl is the lease's TTL, hold how
// long the record tells contenders to watch it (ttl, or more), record
// the store's word for a key's record.
func LockDelayAfterWatch(t *testing.T, s, other Watcher, ttl, hold time.Duration, record string) {
	ctx := testCtx(t)
	delay := 2 * ttl
	const key = "k"
	req := fence.Request{Key: key, Owner: "owner-a", TTL: ttl, LockDelay: delay}
	reqB := fence.Request{Key: key, Owner: "owner-b", TTL: ttl}
	c, err := s.TryAcquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	first := time.Now() // the contender's watch starts no sooner
	if h, err := other.Inspect(ctx, key); err != nil || h.Owner != "owner-a" || h.ExpiresIn != hold+delay {
		t.Errorf("Inspect of a new lease with a lock-delay: %+v, %v; want owner-a expiring in its TTL and delay (%v)", h, err, hold+delay)
	}
	inDelay := func(why string) {
		t.Helper()
		_, err := other.TryAcquire(ctx, reqB)
		var held *fence.HeldError
		if !errors.As(err, &held) || held.Holder == nil || held.Holder.Owner != "owner-a" ||
			held.Holder.ExpiresIn <= 0 || held.Holder.ExpiresIn > delay {
			t.Fatalf("%s: a contender that watched the %s for the TTL took the key within its lock-delay: %v (holder %+v); "+
				"want a *HeldError naming owner-a, free within %v", why, record, err, held, delay)
		}
		h, err := other.Inspect(ctx, key)
		if err != nil || h.Owner != "owner-a" || h.Token != c.Token() || h.ExpiresIn <= 0 || h.ExpiresIn > delay {
			t.Errorf("%s: Inspect within the lock-delay: %+v, %v; want the lost holder, free within %v", why, h, err, delay)
		}
	}
	// Past the TTL: the lease is over on every clock, and the contender
	// has watched the record for all of it.
	time.Sleep(time.Until(first.Add(hold + ttl/4)))
	inDelay("a TTL after the contender's first look")
	if err := c.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("the lost holder's Release within its lock-delay: %v; want ErrNotHeld", err)
	}
	inDelay("after the lost holder's Release")
	if err := c.Extend(ctx, ttl); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("the lost holder's Extend within its lock-delay: %v; want ErrNotHeld", err)
	}
	if r, ok := other.(fence.Resumer); ok {
		if _, err := r.Resume(ctx, req, c.Token()); !errors.Is(err, fence.ErrNotHeld) {
			t.Errorf("Resume of a lease in its lock-delay: %v; want ErrNotHeld", err)
		}
	}
	inDelay("after the lost holder's Extend and Resume")

	var got fence.Claim
	for got == nil {
		time.Sleep(100 * time.Millisecond)
		got, err = other.TryAcquire(ctx, reqB)
		if err != nil && !errors.Is(err, fence.ErrHeld) {
			t.Fatal(err)
		}
		if took := time.Since(first); got == nil && took > hold+delay+5*time.Second {
			t.Fatalf("key not taken %v after the contender's first look; its TTL and lock-delay are %v", took, hold+delay)
		}
	}
	if took := time.Since(first); took < hold+delay {
		t.Errorf("key taken %v after the contender's first look; want its TTL and lock-delay (%v) of watching", took, hold+delay)
	}
	if got.Token() <= c.Token() {
		t.Errorf("token %d after the lock-delay is not greater than %d", got.Token(), c.Token())
	}
	if err := got.Release(ctx); err != nil {
		t.Error(err)
	}
}
