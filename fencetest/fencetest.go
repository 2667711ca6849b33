// Package fencetest is the conformance suite for fence drivers, in the
// spirit of testing/fstest.TestFS: one function, Run, that checks a driver
// against every rule of fence's contract and reports every problem it
// finds. The contract is the Driver interface's doc comments (and those of
// the optional interfaces) and section 3 of docs/design.md, whose rules
// are cited below by number.
//
// A driver's test calls Run first thing, with all of its setup (starting a
// server, creating a schema) inside Config.Setup:
//
//	func TestConformance(t *testing.T) {
//		fencetest.Run(t, fencetest.Config{
//			Setup: func(t *testing.T) fencetest.Store {
//				srv := testserver.Redis(t)
//				return fencetest.Store{Connect: srv.Addr(), Delete: ...}
//			},
//			Open: func(connect string) (fence.Driver, func() error, error) { ... },
//		})
//	}
//
// Run re-executes the test binary to run contenders in separate OS
// processes; in those processes Run finds itself by the test's name,
// skips Setup, and opens the store through Open with the connect string.
// So Setup must hold every side effect, and Open must work from the
// connect string alone.
//
// Where the Client would hide a broken rule (its renewals make up for a
// lease granted too short, its polling for a Watch that never fires, its
// validation for input a driver would mishandle), the check calls the
// driver itself and watches the store. The checks, each a subtest, with
// the rules they enforce:
//   - BadInput (rule 8): empty, oversized, non-UTF-8 and NUL keys, zero,
//     negative and too-short TTLs are refused with ErrInvalidKey /
//     ErrInvalidTTL and change nothing; sent to the driver itself, a TTL
//     of an hour and 16 KiB of metadata are granted in full (as Inspect
//     shows) or refused with ErrInvalidTTL / ErrInvalidOption, leaving the
//     key free.
//   - KeyShapes (Request.Key): keys with slashes, dots, braces, unicode,
//     case differences and MaxKeyLen bytes are distinct locks.
//   - TryAcquireHeld (Driver.TryAcquire, rule 1): the driver's TryAcquire
//     on a key held in any kind answers with a *HeldError at once, never
//     waiting, naming the true holder if it names one; through the Client
//     too, with the holder where the driver can Inspect, and from the same
//     Client (leases are not reentrant).
//   - Tokens (rule 2): tokens strictly increase for a key across release
//     and re-acquire, across clients, after expiry and after a steal.
//   - TTLInStore (Driver.TryAcquire, Claim.Extend, rule 3): watching the
//     store, another owner's TryAcquire is refused until the TTL minus the
//     Client's drift margin after the grant request, and after an extend
//     request.
//   - MutualExclusion (rule 1): many goroutines on several clients contend
//     for one key; at most one is ever inside, and tokens increase in the
//     order of entry.
//   - MutualExclusionProcesses (rule 1): the same across several OS
//     processes.
//   - WaitWakes (rule 7): a waiting Acquire gets the key after its
//     release.
//   - Watch (Watcher, rule 7): for every kind, after the driver's Watch
//     returns, a release puts a value on its channel within the slack.
//   - WaitTimeout: WithWait ends a wait with a *HeldError, naming the
//     holder where the driver can Inspect.
//   - CancelledWait (BlockingAcquirer, rule 7): a cancelled wait returns
//     the context's error and leaves nothing behind (the next contender
//     gets the key at once); a writer that gives up lets readers in.
//   - LocalValidity (rules 3 and 5): without renewal, a lease is lost
//     locally no earlier than its TTL minus margin after the request and
//     no later than its TTL plus slack; for TTL stores a new holder gets
//     the key only after the old holder's context was cancelled; for
//     session-bound stores the key stays held until the old holder
//     releases; the old holder's late Release does not touch the new one.
//   - Renewal: automatic renewal keeps a lease over several TTLs.
//   - ForcedLoss (Claim.Extend, rules 4 and 5): a lease deleted behind its
//     holder's back (Store.Delete) is lost within a renew interval; the
//     next holder gets a greater token; the old holder's Release does not
//     touch the new holder.
//   - SessionLoss (SessionClaim, rules 4 and 6), where
//     Store.KillSession is given: the session of a lock's, a semaphore
//     slot's and a reader's holder killed in the store ends the lease
//     promptly with LossSession, frees the key for the waiting contender
//     with a greater token, and the holder's client acquires again; a
//     session killed before its loss could be received (a driver-level
//     claim, its loss function registered only after the kill) is still
//     reported.
//   - StateLoss (rule 9), where Store.Wipe is given: once the store has
//     lost everything of a key, counters included, the next tokens of
//     every kind are still greater.
//   - HolderDies (rule 6): a holder process killed with SIGKILL stops
//     holding: at once for session-bound stores, after the TTL otherwise.
//   - Release (Claim.Release, rule 5): a second Release reports
//     ErrReleased; Release after loss reports ErrLost, also where the
//     loss shows only at the release (the lease deleted in the store and
//     no renewal since).
//   - Inspect (Inspector, Request.Meta) and List (Lister), where the
//     driver implements them: the true holder, token and metadata; keys
//     under a prefix, sorted.
//   - Waiters (WaiterCounter), where the driver implements it: waiters
//     are counted as they come, give up and get the key.
//   - FIFO and SemaphoreFIFO, where Store.Queue is given: waiters get a
//     lock, or a semaphore's slots one per slot freed, in arrival order
//     with tokens in that order; a waiter that gives up leaves its place.
//   - Kinds (Request.Kind): a lock, a semaphore and a reader-writer lock
//     of one key do not block each other, each still excludes its own,
//     and Inspect and List name the lock only.
//   - Semaphore (KindSemaphore, rules 1 and 2), where the driver supports
//     it: never more than the limit, ErrLimitMismatch for a disagreeing
//     limit, waiting, expiry, tokens in real-time order.
//   - RWMutex (KindRead, KindWrite), where the driver supports them:
//     readers share, a writer excludes everyone, a writer's token is
//     greater than the readers' before it, tokens in real-time order.
//   - RWWriterPreference (KindRead): once a writer waits, new readers are
//     refused, and a reader that waits too gets in after the writer, so a
//     stream of readers cannot starve a writer.
//   - Partitions (rules 1 and 6), where the driver implements Inspector:
//     worker processes (goroutines for a single-process store) sharing
//     named partitions balance them within one of P/W as workers join,
//     leave and are killed with SIGKILL; a guarded resource never sees two
//     owners of a partition at once; nothing stays held once they are gone.
//   - Multi (AcquireAll, MultiAcquirer): a set of keys is taken all or
//     none, each key with its own token, by the Client on every driver
//     and by the driver's own TryAcquireAll where it has one (or refuses
//     with ErrUnsupported); a key held by another owner leaves every
//     other key free; clients taking overlapping sets in opposite orders
//     never deadlock nor share a key.
//   - LockDelay (LockDelayer, Request.LockDelay), where the driver keeps
//     it: a lease ended without a release (its TTL run out, or its
//     session killed) keeps the key from everyone for the delay after,
//     no less (allowing for drift) and not much more; a released key is
//     free at once; within the delay, a resume of the lost lease is
//     refused (ErrNotHeld) and a break of it lifts the delay. Other
//     drivers must be refused WithLockDelay.
//   - Break (Breaker), where the driver implements it: a break with a
//     stale token changes nothing; one with the holder's token frees the
//     key, the broken holder's renewal is refused, the next token is
//     greater, and a guard refuses the broken holder's late write (at
//     once with AdvanceGuard).
//   - Resume (Resumer), where the driver implements it: the holder's
//     owner and token take the lease back with its token, extended;
//     another owner or token gets ErrHeld, an expired lease ErrNotHeld.
//   - BatchExtend (BatchExtender), where the driver implements it: one
//     result per claim, in order; a claim whose lease another owner took
//     is refused among live ones, which are extended by the TTL asked
//     (rule 3); the new owner keeps the key.
//   - Outage, where Store.Outage is given: a waiting Acquire waits through
//     the store's outage (errors matching fence.ErrUnavailable) and gets
//     the key once the store is back; a try in the outage fails, never as
//     held.
//   - Leftovers (rules 6 and 7): once every lease is released nothing is
//     left behind, when Store.Leftovers is given.
//
// The suite's own test (fencetest_test.go, mutants_test.go) shows every
// check able to fail: it runs the suite against one broken driver per rule
// and needs each caught by the check meant for it.
package fencetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing/fence"
)

// Config describes the driver under test.
type Config struct {
	// Setup prepares the store (starts a server, creates a schema) and
	// returns how to reach it. It runs once, in the test's own process only,
	// never in the contender processes the suite starts. Required.
	Setup func(t *testing.T) Store
	// Open returns a new driver for the store: a new client with its own
	// connections, so that two drivers from Open contend like two
	// machines. It is called in the test's process and in contender
	// processes, with Store.Connect. close releases the driver's resources.
	// Required.
	Open func(connect string) (drv fence.Driver, close func() error, err error)
	// TTL is the lease TTL the suite uses. Default 1s. Stores with a
	// coarser or larger minimum TTL set their own.
	TTL time.Duration
	// SessionBound says that a lease ends when its holder's session (its
	// connection, its process) ends, not after a TTL in the store, as with
	// file locks and advisory locks.
	SessionBound bool
	// SingleProcess says that the store lives in one process (fencemem):
	// the checks that need several processes are skipped.
	SingleProcess bool
	// ContenderClock says that expiry is judged by each contender that
	// watches a lease's record stay unchanged for the TTL on its own
	// clock (Kubernetes, Azure Table, DynamoDB): a resume at a Client's
	// first look cannot tell a lease that ended from a live one, so the
	// LockDelay check does not ask a resume within the delay to be
	// refused (docs/primitives.md, Resume).
	ContenderClock bool
}

// Store is how the suite reaches a store that Setup prepared.
type Store struct {
	// Connect is given to Open, in every process.
	Connect string
	// Delete removes key's lease in the store behind its holder's back, as
	// an operator or a store failure might, keeping whatever the store needs
	// to keep tokens increasing. Required.
	Delete func(ctx context.Context, key string) error
	// Leftovers returns a description of every entry the store holds for
	// keys starting with prefix, apart from what it must keep for tokens
	// to keep increasing (counters). The suite calls it once every lease
	// is released and expects nothing. Optional.
	Leftovers func(ctx context.Context, prefix string) ([]string, error)
	// Queue, for stores whose contenders queue in the store in arrival
	// order (etcd, ZooKeeper), returns how many entries, holders and
	// waiters, the queue of key for kind holds (KindRead and KindWrite
	// share one queue). Given, the suite checks that waiters are served
	// first come, first served. Optional.
	Queue func(ctx context.Context, key string, kind fence.Kind) (int, error)
	// KillSession ends, in the store, the session or connection of the
	// holder of key in kind (for a semaphore, of one of its holders), as an
	// operator or a crash of the connection would: pg_terminate_backend,
	// MySQL's KILL, an etcd lease revoke, a ZooKeeper session closed by the
	// server. It returns once the store has ended it. Given, the suite
	// checks that the holder's lease is lost promptly (well under its TTL)
	// with LossSession, and that the key goes to the next contender with a
	// greater token. For stores whose leases are bound to a session;
	// optional.
	KillSession func(ctx context.Context, key string, kind fence.Kind) error
	// Wipe removes everything the store keeps for key, in every kind,
	// counters included, as a lost disk, a truncated table or an empty
	// restart would: lock and counter files deleted, rows deleted, keys and
	// their counters DEL'ed, a bucket's entries purged. The suite calls it
	// only while key is free, and checks that the next tokens are still
	// greater than every earlier one (docs/design.md rule 9). Optional: leave it
	// nil where the store keeps nothing to lose per key (say why in the
	// wiring).
	Wipe func(ctx context.Context, key string) error
	// Outage makes the store unable to answer, as a crashed server or a
	// cluster without a quorum is (its server killed, its client's
	// connections refused), and returns restore, which brings it back and
	// returns once it answers. Given, the suite checks that a waiting
	// Acquire waits through the outage and gets the key once the store is
	// back, and that a try during it fails, with fence.ErrUnavailable
	// where the driver can tell. Called from the test goroutine, which
	// restore may fail. Optional.
	Outage func(t *testing.T) (restore func())
}

const (
	envWorker  = "FENCETEST_WORKER"
	envConnect = "FENCETEST_CONNECT"
	envRole    = "FENCETEST_ROLE"
	envKey     = "FENCETEST_KEY"
	envDir     = "FENCETEST_DIR"
	envCount   = "FENCETEST_COUNT"
	envTTL     = "FENCETEST_TTL"
)

// Run checks the driver described by cfg against fence's contract.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.Setup == nil || cfg.Open == nil {
		t.Fatal("fencetest: Config.Setup and Config.Open are required")
	}
	if cfg.TTL == 0 {
		cfg.TTL = time.Second
	}
	if w := os.Getenv(envWorker); w != "" {
		if w == t.Name() {
			runWorker(t, cfg)
		} else {
			t.Skip("fencetest: contender process for another test")
		}
		return
	}
	store := cfg.Setup(t)
	if store.Delete == nil {
		t.Fatal("fencetest: Store.Delete is required")
	}
	s := &suite{cfg: cfg, store: store, run: randomHex(4), name: t.Name()}

	t.Run("BadInput", s.badInput)
	t.Run("KeyShapes", s.keyShapes)
	t.Run("TryAcquireHeld", s.tryAcquireHeld)
	t.Run("Tokens", s.tokens)
	t.Run("TTLInStore", s.ttlInStore)
	t.Run("MutualExclusion", s.mutualExclusion)
	t.Run("MutualExclusionProcesses", s.mutualExclusionProcesses)
	t.Run("WaitWakes", s.waitWakes)
	t.Run("Watch", s.watch)
	t.Run("WaitTimeout", s.waitTimeout)
	t.Run("CancelledWait", s.cancelledWait)
	t.Run("LocalValidity", s.localValidity)
	t.Run("Renewal", s.renewal)
	t.Run("ForcedLoss", s.forcedLoss)
	t.Run("SessionLoss", s.sessionLoss)
	t.Run("StateLoss", s.stateLoss)
	t.Run("HolderDies", s.holderDies)
	t.Run("Release", s.release)
	t.Run("Inspect", s.inspect)
	t.Run("List", s.list)
	t.Run("Waiters", s.waiters)
	t.Run("FIFO", s.fifo)
	t.Run("SemaphoreFIFO", s.semaphoreFIFO)
	t.Run("Kinds", s.kindsSeparate)
	t.Run("Semaphore", s.semaphore)
	t.Run("RWMutex", s.rwmutex)
	t.Run("RWWriterPreference", s.rwWriterPreference)
	t.Run("Partitions", s.partitions)
	t.Run("Multi", s.multi)
	t.Run("LockDelay", s.lockDelay)
	t.Run("Break", s.breaking)
	t.Run("Resume", s.resuming)
	t.Run("BatchExtend", s.batchExtend)
	t.Run("Outage", s.outage)
	t.Run("Leftovers", s.leftovers)
}

type suite struct {
	cfg   Config
	store Store
	run   string // distinguishes this run's keys from earlier runs'
	name  string // the test that called Run, for contender processes
}

// key returns a key unique to this run and check.
func (s *suite) key(t *testing.T, name string) string {
	check := t.Name()
	if i := strings.Index(check, "/"); i >= 0 {
		check = check[i+1:]
	}
	return "fencetest/" + s.run + "/" + check + "/" + name
}

func (s *suite) prefix() string { return "fencetest/" + s.run + "/" }

// client opens a new driver and returns a Client over it with the suite's
// TTL. The driver is closed when the test ends.
func (s *suite) client(t *testing.T, opts ...fence.ClientOption) *fence.Client {
	t.Helper()
	drv, closeDrv, err := s.cfg.Open(s.store.Connect)
	if err != nil {
		t.Fatalf("Open(%q): %v", s.store.Connect, err)
	}
	c := fence.New(drv, append([]fence.ClientOption{fence.WithTTL(s.cfg.TTL)}, opts...)...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.slack())
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("closing client: %v", err)
		}
		if closeDrv != nil {
			if err := closeDrv(); err != nil {
				t.Errorf("closing driver: %v", err)
			}
		}
	})
	return c
}

// slack is the generous allowance for scheduling and round trips on a
// loaded machine.
func (s *suite) slack() time.Duration { return max(5*time.Second, 2*s.cfg.TTL) }

func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*s.slack())
	t.Cleanup(cancel)
	return ctx
}

func mustAcquire(t *testing.T, ctx context.Context, c *fence.Client, key string, opts ...fence.AcquireOption) *fence.Lease {
	t.Helper()
	l, err := c.TryAcquire(ctx, key, opts...)
	if err != nil {
		t.Fatalf("TryAcquire(%q): %v", key, err)
	}
	return l
}

func mustRelease(t *testing.T, ctx context.Context, l *fence.Lease) {
	t.Helper()
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release(%q, token %d): %v", l.Key(), l.Token(), err)
	}
}

// expectHeld checks that key is held, by trying to take it with c.
func expectHeld(t *testing.T, ctx context.Context, c *fence.Client, key, why string) {
	t.Helper()
	l, err := c.TryAcquire(ctx, key)
	if err == nil {
		t.Errorf("%s: TryAcquire(%q) succeeded with token %d; want ErrHeld", why, key, l.Token())
		_ = l.Release(ctx)
		return
	}
	if !errors.Is(err, fence.ErrHeld) {
		t.Errorf("%s: TryAcquire(%q): %v; want ErrHeld", why, key, err)
	}
}

// expectHeldBefore checks, as expectHeld does, that key is held, on
// a lease the store may end at deadline. A TryAcquire that succeeds
// only after deadline proves nothing: the store may have ended the
// lease first. It releases that lease, logs why, and returns false;
// the caller's lease is then likely gone.
func expectHeldBefore(t *testing.T, ctx context.Context, c *fence.Client, key, why string, deadline time.Time) bool {
	t.Helper()
	l, err := c.TryAcquire(ctx, key)
	if err == nil && time.Now().After(deadline) {
		t.Logf("%s: TryAcquire(%q) succeeded, but its answer came %v past when the store could end the lease: no proof either way", why, key, time.Since(deadline))
		_ = l.Release(ctx)
		return false
	}
	if err == nil {
		t.Errorf("%s: TryAcquire(%q) succeeded with token %d; want ErrHeld", why, key, l.Token())
		_ = l.Release(ctx)
		return true
	}
	if !errors.Is(err, fence.ErrHeld) {
		t.Errorf("%s: TryAcquire(%q): %v; want ErrHeld", why, key, err)
	}
	return true
}

func (s *suite) badInput(t *testing.T) {
	ctx := s.ctx(t)
	c := s.client(t)
	good := s.key(t, "k")
	keys := map[string]string{
		"empty":     "",
		"oversized": strings.Repeat("k", fence.MaxKeyLen+1),
		"not UTF-8": "bad\xffkey",
		"NUL byte":  "nul\x00key",
	}
	for name, key := range keys {
		if _, err := c.TryAcquire(ctx, key); !errors.Is(err, fence.ErrInvalidKey) {
			t.Errorf("TryAcquire with %s key: %v; want ErrInvalidKey", name, err)
		}
		if _, err := c.Acquire(ctx, key); !errors.Is(err, fence.ErrInvalidKey) {
			t.Errorf("Acquire with %s key: %v; want ErrInvalidKey", name, err)
		}
	}
	ttls := map[string]time.Duration{
		"zero":      0,
		"negative":  -time.Second,
		"too short": fence.MinTTL / 2,
	}
	for name, ttl := range ttls {
		if _, err := c.TryAcquire(ctx, good, fence.WithTTL(ttl)); !errors.Is(err, fence.ErrInvalidTTL) {
			t.Errorf("TryAcquire with %s TTL %v: %v; want ErrInvalidTTL", name, ttl, err)
		}
	}
	if _, err := c.TryAcquire(ctx, good, fence.WithRenewInterval(s.cfg.TTL)); !errors.Is(err, fence.ErrInvalidTTL) {
		t.Errorf("TryAcquire renewing every TTL: %v; want ErrInvalidTTL (no time to renew)", err)
	}
	if _, err := c.Acquire(ctx, good, fence.WithWait(-1)); !errors.Is(err, fence.ErrInvalidOption) {
		t.Errorf("Acquire with negative wait: %v; want ErrInvalidOption", err)
	}
	// None of that may have touched the store.
	l := mustAcquire(t, ctx, c, good)
	mustRelease(t, ctx, l)

	s.badInputDriver(t, ctx)
}

func (s *suite) keyShapes(t *testing.T) {
	ctx := s.ctx(t)
	c := s.client(t)
	base := s.key(t, "")
	shapes := []string{
		"plain", "Plain", "PLAIN",
		"a/b", "a/b/", "a//b", ".", "..", "../../etc/passwd", "/abs",
		"{tag}", "{tag}x", "x{tag}", "with space", "colon:name", "star*", "q?",
		"ключ", "鍵🔒", "e\u0301", "\u00e9",
	}
	keys := make([]string, 0, len(shapes)+1)
	for _, sh := range shapes {
		keys = append(keys, base+sh)
	}
	long := base + strings.Repeat("L", fence.MaxKeyLen-len(base)-1) + "x"
	keys = append(keys, long, long[:len(long)-1]+"y")

	leases := make([]*fence.Lease, 0, len(keys))
	for _, k := range keys {
		l, err := c.TryAcquire(ctx, k)
		if err != nil {
			t.Errorf("TryAcquire(%.40q... (%d bytes)): %v; distinct keys must be distinct locks", k, len(k), err)
			continue
		}
		leases = append(leases, l)
	}
	other := s.client(t)
	for _, l := range leases {
		expectHeld(t, ctx, other, l.Key(), "key shape held by another client")
	}
	for _, l := range leases {
		mustRelease(t, ctx, l)
	}
	for _, k := range keys {
		l, err := other.TryAcquire(ctx, k)
		if err != nil {
			t.Errorf("after release, TryAcquire(%.40q...): %v", k, err)
			continue
		}
		mustRelease(t, ctx, l)
	}
}

func (s *suite) tryAcquireHeld(t *testing.T) {
	ctx := s.ctx(t)
	s.tryNeverWaits(t, ctx)
	a, b := s.client(t), s.client(t)
	key := s.key(t, "k")
	l := mustAcquire(t, ctx, a, key)
	defer mustRelease(t, ctx, l)

	start := time.Now()
	_, err := b.TryAcquire(ctx, key)
	if elapsed := time.Since(start); elapsed > s.slack() {
		t.Errorf("TryAcquire on a held key took %v; it must not wait", elapsed)
	}
	var held *fence.HeldError
	switch {
	case !errors.As(err, &held):
		t.Fatalf("TryAcquire on a held key: %v; want a *HeldError", err)
	case held.Key != key:
		t.Errorf("HeldError.Key = %q; want %q", held.Key, key)
	case !strings.Contains(err.Error(), key):
		t.Errorf("error %q does not name the key", err)
	}
	if _, ok := a.Driver().(fence.Inspector); ok && held != nil {
		if held.Holder == nil {
			t.Errorf("HeldError.Holder is nil, though the driver can Inspect")
		} else if held.Holder.Owner != l.Owner() || held.Holder.Token != l.Token() {
			t.Errorf("HeldError.Holder = owner %q token %d; want owner %q token %d",
				held.Holder.Owner, held.Holder.Token, l.Owner(), l.Token())
		}
	}
	expectHeld(t, ctx, a, key, "not reentrant: same client")
	if l.Err() != nil {
		t.Errorf("holder's lease ended after others tried to take it: %v", l.Err())
	}
}

func (s *suite) tokens(t *testing.T) {
	ctx := s.ctx(t)
	a, b := s.client(t), s.client(t)
	key := s.key(t, "k")
	var last int64
	next := func(how string, l *fence.Lease) {
		t.Helper()
		if l.Token() <= last {
			t.Errorf("%s: token %d, not greater than the previous %d", how, l.Token(), last)
		}
		if l.Token() <= 0 {
			t.Errorf("%s: token %d is not positive", how, l.Token())
		}
		last = l.Token()
	}
	for i := range 6 {
		c := a
		if i%2 == 1 {
			c = b
		}
		l := mustAcquire(t, ctx, c, key)
		next(fmt.Sprintf("release then acquire #%d", i), l)
		mustRelease(t, ctx, l)
	}

	// After a steal (the store loses the lease behind the holder's back).
	l := mustAcquire(t, ctx, a, key)
	next("acquire", l)
	if err := s.store.Delete(ctx, key); err != nil {
		t.Fatalf("Store.Delete(%q): %v", key, err)
	}
	l2 := mustAcquire(t, ctx, b, key)
	next("acquire after steal", l2)
	mustRelease(t, ctx, l2)
	_ = l.Release(ctx)

	// After expiry (TTL stores) or the end of the holder's local validity
	// and its release (session-bound stores).
	l = mustAcquire(t, ctx, a, key, fence.WithoutRenewal())
	next("acquire without renewal", l)
	select {
	case <-l.Done():
	case <-time.After(s.cfg.TTL + s.slack()):
		t.Fatalf("lease without renewal still valid %v after its TTL", s.slack())
	}
	if s.cfg.SessionBound {
		_ = l.Release(ctx)
	}
	l2, err := b.Acquire(ctx, key, fence.WithWait(s.cfg.TTL+s.slack()))
	if err != nil {
		t.Fatalf("Acquire after expiry: %v", err)
	}
	next("acquire after expiry", l2)
	mustRelease(t, ctx, l2)
}

func (s *suite) mutualExclusion(t *testing.T) {
	ctx := s.ctx(t)
	key := s.key(t, "k")
	const clients, perClient, rounds = 3, 3, 4
	var (
		inside     atomic.Int32
		mu         sync.Mutex
		tokens     []int64
		violations atomic.Int32
		wg         sync.WaitGroup
	)
	for range clients {
		c := s.client(t)
		for range perClient {
			wg.Go(func() {
				for range rounds {
					l, err := c.Acquire(ctx, key)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					if n := inside.Add(1); n != 1 {
						violations.Add(1)
					}
					mu.Lock()
					tokens = append(tokens, l.Token())
					mu.Unlock()
					time.Sleep(time.Millisecond)
					inside.Add(-1)
					if err := l.Err(); err != nil {
						t.Errorf("lease lost inside the critical section: %v", err)
					}
					mustRelease(t, ctx, l)
				}
			})
		}
	}
	wg.Wait()
	if v := violations.Load(); v > 0 {
		t.Errorf("mutual exclusion violated %d times: two holders inside at once", v)
	}
	checkIncreasing(t, tokens, clients*perClient*rounds)
}

func checkIncreasing(t *testing.T, tokens []int64, want int) {
	t.Helper()
	if len(tokens) != want {
		t.Errorf("%d acquisitions recorded; want %d", len(tokens), want)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("tokens in order of acquisition are not strictly increasing: #%d is %d after %d (all: %v)",
				i, tokens[i], tokens[i-1], tokens)
			return
		}
	}
}

func (s *suite) waitWakes(t *testing.T) {
	ctx := s.ctx(t)
	a, b := s.client(t), s.client(t)
	key := s.key(t, "k")
	l := mustAcquire(t, ctx, a, key)
	got := make(chan *fence.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		l2, err := b.Acquire(ctx, key)
		if err != nil {
			errc <- err
			return
		}
		got <- l2
	}()
	time.Sleep(s.cfg.TTL / 4)
	select {
	case l2 := <-got:
		t.Fatalf("waiter acquired token %d while the key was held by token %d", l2.Token(), l.Token())
	case err := <-errc:
		t.Fatalf("waiting Acquire: %v", err)
	default:
	}
	mustRelease(t, ctx, l)
	released := time.Now()
	select {
	case l2 := <-got:
		if l2.Token() <= l.Token() {
			t.Errorf("waiter's token %d is not greater than the released %d", l2.Token(), l.Token())
		}
		t.Logf("handoff took %v", time.Since(released))
		mustRelease(t, ctx, l2)
	case err := <-errc:
		t.Fatalf("waiting Acquire: %v", err)
	case <-time.After(s.slack()):
		t.Fatalf("waiter did not get the key within %v of its release", s.slack())
	}
}

func (s *suite) waitTimeout(t *testing.T) {
	ctx := s.ctx(t)
	a, b := s.client(t), s.client(t)
	key := s.key(t, "k")
	l := mustAcquire(t, ctx, a, key)
	defer mustRelease(t, ctx, l)
	wait := s.cfg.TTL / 2
	start := time.Now()
	_, err := b.Acquire(ctx, key, fence.WithWait(wait))
	elapsed := time.Since(start)
	if !errors.Is(err, fence.ErrHeld) {
		t.Errorf("Acquire with a wait timeout on a held key: %v; want ErrHeld", err)
	}
	if elapsed < wait || elapsed > wait+s.slack() {
		t.Errorf("Acquire with a %v wait timeout returned after %v", wait, elapsed)
	}
	// The holder is named even where the try before the wait skipped it
	// (Request.SkipHolder).
	var held *fence.HeldError
	if _, ok := a.Driver().(fence.Inspector); ok && errors.As(err, &held) {
		if held.Holder == nil {
			t.Errorf("HeldError.Holder after a wait timeout is nil, though the driver can Inspect")
		} else if held.Holder.Owner != l.Owner() || held.Holder.Token != l.Token() {
			t.Errorf("HeldError.Holder after a wait timeout = owner %q token %d; want owner %q token %d",
				held.Holder.Owner, held.Holder.Token, l.Owner(), l.Token())
		}
	}
}

func (s *suite) cancelledWait(t *testing.T) {
	ctx := s.ctx(t)
	a, b, c := s.client(t), s.client(t), s.client(t)
	key := s.key(t, "k")
	l := mustAcquire(t, ctx, a, key)
	wctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(s.cfg.TTL/4, cancel)
	_, err := b.Acquire(wctx, key)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Acquire: %v; want context.Canceled", err)
	}
	mustRelease(t, ctx, l)
	// Nothing of the cancelled waiter may stand in the way.
	l2, err := c.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire after a cancelled wait and a release: %v; the cancelled waiter left something behind", err)
	}
	mustRelease(t, ctx, l2)

	if !slices.Contains(kinds(a.Driver()), fence.KindWrite) {
		return
	}
	// A writer that gives up lets new readers in: at once where the store
	// queues waiters, once its mark lapses (a TTL) where it keeps one.
	rw := s.key(t, "rw")
	r1, err := a.RWMutex(rw).TryAcquireRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel = context.WithCancel(ctx)
	time.AfterFunc(s.cfg.TTL/4, cancel)
	if _, err := b.RWMutex(rw).AcquireWrite(wctx); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled AcquireWrite: %v; want context.Canceled", err)
	}
	gaveUp := time.Now()
	r2, err := c.RWMutex(rw).AcquireRead(ctx, fence.WithWait(s.cfg.TTL+s.slack()))
	if err != nil {
		t.Fatalf("a reader %v after a writer gave up its wait: %v; the cancelled writer left something behind", time.Since(gaveUp), err)
	}
	t.Logf("a reader got in %v after the writer gave up", time.Since(gaveUp).Round(time.Millisecond))
	mustRelease(t, ctx, r2)
	mustRelease(t, ctx, r1)
}

func (s *suite) localValidity(t *testing.T) {
	ctx := s.ctx(t)
	a, b := s.client(t), s.client(t)
	key := s.key(t, "k")
	sent := time.Now()
	l := mustAcquire(t, ctx, a, key, fence.WithoutRenewal())
	if v := l.ValidFor(); v <= 0 || v > s.cfg.TTL {
		t.Errorf("fresh lease ValidFor() = %v; want within (0, TTL %v]", v, s.cfg.TTL)
	}
	var lostAt time.Time
	waiter := make(chan *fence.Lease, 1)
	go func() {
		l2, err := b.Acquire(ctx, key, fence.WithWait(s.cfg.TTL+s.slack()))
		if err != nil {
			waiter <- nil
			return
		}
		waiter <- l2
	}()

	select {
	case <-l.Done():
		lostAt = time.Now()
	case <-time.After(s.cfg.TTL + s.slack()):
		t.Fatalf("lease without renewal still valid %v after its TTL %v", s.slack(), s.cfg.TTL)
	}
	if early := s.cfg.TTL - s.cfg.TTL/50 - 5*time.Millisecond - 20*time.Millisecond; lostAt.Sub(sent) < early {
		t.Errorf("lease lost after %v, before its validity (TTL %v minus margin) could end", lostAt.Sub(sent), s.cfg.TTL)
	}
	var lost *fence.LostError
	if err := l.Err(); !errors.As(err, &lost) || lost.Reason != fence.LossExpired {
		t.Errorf("cause of the expired lease: %v; want a *LostError with reason %q", err, fence.LossExpired)
	}
	if l.ValidFor() != 0 {
		t.Errorf("lost lease ValidFor() = %v; want 0", l.ValidFor())
	}

	if s.cfg.SessionBound {
		// The store keeps the lease while the holder's session lives.
		select {
		case l2 := <-waiter:
			t.Fatalf("session-bound lease taken (token %v) while its holder's session lives", l2)
		case <-time.After(s.cfg.TTL / 2):
		}
		if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
			t.Errorf("Release of a locally expired lease: %v; want ErrLost", err)
		}
	}
	select {
	case l2 := <-waiter:
		if l2 == nil {
			t.Fatalf("waiter did not get the key after the holder's lease expired")
		}
		if l.Err() == nil {
			t.Errorf("new holder got the key while the old holder's lease was still valid locally")
		}
		if l2.Token() <= l.Token() {
			t.Errorf("new holder's token %d is not greater than the old %d", l2.Token(), l.Token())
		}
		// The old holder's late Release must not touch the new holder.
		if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
			t.Errorf("Release of the expired lease: %v; want ErrLost", err)
		}
		expectHeld(t, ctx, a, key, "the expired holder's Release must not touch the new holder")
		mustRelease(t, ctx, l2)
	case <-time.After(s.cfg.TTL + 2*s.slack()):
		t.Fatalf("waiter did not get the key after the holder's lease expired")
	}
}

func (s *suite) renewal(t *testing.T) {
	ctx := s.ctx(t)
	a, b := s.client(t), s.client(t)
	key := s.key(t, "k")
	l := mustAcquire(t, ctx, a, key)
	deadline := time.Now().Add(3 * s.cfg.TTL)
	for time.Now().Before(deadline) {
		time.Sleep(s.cfg.TTL / 2)
		if err := l.Err(); err != nil {
			t.Fatalf("renewed lease lost after %v: %v", time.Since(l.AcquiredAt()), err)
		}
		expectHeld(t, ctx, b, key, "renewed lease")
	}
	if v := l.ValidFor(); v <= 0 {
		t.Errorf("renewed lease ValidFor() = %v", v)
	}
	mustRelease(t, ctx, l)
}

func (s *suite) forcedLoss(t *testing.T) {
	ctx := s.ctx(t)
	a, b, c := s.client(t), s.client(t), s.client(t)
	key := s.key(t, "k")
	l := mustAcquire(t, ctx, a, key)
	if err := s.store.Delete(ctx, key); err != nil {
		t.Fatalf("Store.Delete(%q): %v", key, err)
	}
	deleted := time.Now()
	l2, err := b.Acquire(ctx, key, fence.WithWait(s.slack()))
	if err != nil {
		t.Fatalf("Acquire after the holder's lease was deleted: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("new holder's token %d is not greater than the old %d", l2.Token(), l.Token())
	}
	renew := s.cfg.TTL / 3
	select {
	case <-l.Done():
		t.Logf("loss noticed after %v", time.Since(deleted))
	case <-time.After(renew + s.slack()):
		t.Errorf("old holder's lease context not cancelled %v after its lease was deleted (renew interval %v)",
			time.Since(deleted), renew)
	}
	var lost *fence.LostError
	if err := l.Err(); !errors.As(err, &lost) {
		t.Errorf("cause of the deleted lease: %v; want a *LostError", err)
	} else if lost.Reason != fence.LossRefused && lost.Reason != fence.LossSession {
		t.Errorf("deleted lease lost with reason %q; want %q or %q", lost.Reason, fence.LossRefused, fence.LossSession)
	}
	if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
		t.Errorf("Release of the lost lease: %v; want ErrLost", err)
	}
	if l.Err() == nil || l2.Err() != nil {
		t.Errorf("after the old holder's Release: old lease err %v, new lease err %v", l.Err(), l2.Err())
	}
	expectHeld(t, ctx, c, key, "the old holder's Release must not touch the new holder")
	// The new holder still owns its lease in the store: renewal works.
	if err := l2.Renew(ctx); err != nil {
		t.Errorf("new holder's Renew after the old holder's Release: %v", err)
	}
	mustRelease(t, ctx, l2)
}

func (s *suite) release(t *testing.T) {
	ctx := s.ctx(t)
	a, b := s.client(t), s.client(t)
	key := s.key(t, "k")
	l := mustAcquire(t, ctx, a, key)
	mustRelease(t, ctx, l)
	select {
	case <-l.Done():
	default:
		t.Errorf("released lease's Done channel is open")
	}
	if err := l.Err(); !errors.Is(err, fence.ErrReleased) {
		t.Errorf("released lease's Err() = %v; want ErrReleased", err)
	}
	if err := l.Release(ctx); !errors.Is(err, fence.ErrReleased) {
		t.Errorf("second Release: %v; want ErrReleased", err)
	}
	l2 := mustAcquire(t, ctx, b, key)
	if err := l.Release(ctx); !errors.Is(err, fence.ErrReleased) {
		t.Errorf("third Release, with a new holder: %v; want ErrReleased", err)
	}
	expectHeld(t, ctx, a, key, "a repeated Release must not touch the new holder")
	if err := l.Renew(ctx); err == nil {
		t.Errorf("Renew of a released lease succeeded")
	}
	mustRelease(t, ctx, l2)

	// A loss found only at release is still a loss (rule 5). Without a
	// renewal to notice it first, only the driver's Release (ErrNotHeld)
	// can tell that the store no longer held the lease.
	l3 := mustAcquire(t, ctx, a, key, fence.WithoutRenewal())
	if err := s.store.Delete(ctx, key); err != nil {
		t.Fatalf("Store.Delete(%q): %v", key, err)
	}
	if err := l3.Release(ctx); !errors.Is(err, fence.ErrLost) {
		t.Errorf("Release of a lease the store no longer held: %v; want ErrLost: the driver's Release must report ErrNotHeld", err)
	}
	l4 := mustAcquire(t, ctx, b, key)
	if l4.Token() <= l3.Token() {
		t.Errorf("token %d after the lost lease's %d", l4.Token(), l3.Token())
	}
	mustRelease(t, ctx, l4)
}

func (s *suite) inspect(t *testing.T) {
	ctx := s.ctx(t)
	a := s.client(t, fence.WithMetadata(map[string]string{"job": "fencetest"}))
	if _, ok := a.Driver().(fence.Inspector); !ok {
		if _, err := a.Inspect(ctx, s.key(t, "k")); !errors.Is(err, fence.ErrUnsupported) {
			t.Errorf("Inspect on a driver without Inspector: %v; want ErrUnsupported", err)
		}
		t.Skip("driver does not implement fence.Inspector")
	}
	key := s.key(t, "k")
	if _, err := a.Inspect(ctx, key); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Inspect of a free key: %v; want ErrNotHeld", err)
	}
	l := mustAcquire(t, ctx, a, key)
	h, err := a.Inspect(ctx, key)
	if err != nil {
		t.Fatalf("Inspect of a held key: %v", err)
	}
	if h.Key != key || h.Owner != l.Owner() || h.Token != l.Token() {
		t.Errorf("Inspect = key %q owner %q token %d; want key %q owner %q token %d",
			h.Key, h.Owner, h.Token, key, l.Owner(), l.Token())
	}
	if !s.cfg.SessionBound && (h.ExpiresIn <= 0 || h.ExpiresIn > s.cfg.TTL+time.Second) {
		t.Errorf("Inspect ExpiresIn = %v; want within (0, TTL %v]", h.ExpiresIn, s.cfg.TTL)
	}
	if h.Meta != nil && h.Meta["job"] != "fencetest" {
		t.Errorf("Inspect Meta = %v; the driver keeps metadata but lost job=fencetest", h.Meta)
	}
	mustRelease(t, ctx, l)
	if _, err := a.Inspect(ctx, key); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Inspect after release: %v; want ErrNotHeld", err)
	}
}

func (s *suite) list(t *testing.T) {
	ctx := s.ctx(t)
	a := s.client(t)
	if _, ok := a.Driver().(fence.Lister); !ok {
		if _, err := a.List(ctx, ""); !errors.Is(err, fence.ErrUnsupported) {
			t.Errorf("List on a driver without Lister: %v; want ErrUnsupported", err)
		}
		t.Skip("driver does not implement fence.Lister")
	}
	prefix := s.key(t, "")
	var leases []*fence.Lease
	for _, name := range []string{"b", "a", "c/d"} {
		leases = append(leases, mustAcquire(t, ctx, a, prefix+name))
	}
	other := mustAcquire(t, ctx, a, s.key(t, "")[:len(prefix)-1]+"-outside")
	hs, err := a.List(ctx, prefix)
	if err != nil {
		t.Fatalf("List(%q): %v", prefix, err)
	}
	var got []string
	for _, h := range hs {
		got = append(got, strings.TrimPrefix(h.Key, prefix))
	}
	if want := "a b c/d"; strings.Join(got, " ") != want {
		t.Errorf("List(prefix) keys = %q; want %q, sorted, without the key outside the prefix", got, want)
	}
	for _, h := range hs {
		for _, l := range leases {
			if l.Key() == h.Key && (h.Owner != l.Owner() || h.Token != l.Token()) {
				t.Errorf("List entry %q: owner %q token %d; want owner %q token %d", h.Key, h.Owner, h.Token, l.Owner(), l.Token())
			}
		}
	}
	mustRelease(t, ctx, leases[0])
	hs, err = a.List(ctx, prefix)
	if err != nil {
		t.Fatalf("List: %v", err)
	}
	if len(hs) != 2 {
		t.Errorf("List after releasing one of three: %d entries; want 2", len(hs))
	}
	for _, l := range append(leases[1:], other) {
		mustRelease(t, ctx, l)
	}
}

// waiters checks a fence.WaiterCounter: it counts the contenders waiting
// for a key, no more and no fewer, as they come, give up and get the key.
func (s *suite) waiters(t *testing.T) {
	ctx := s.ctx(t)
	a := s.client(t)
	wc, ok := a.Driver().(fence.WaiterCounter)
	if !ok {
		t.Skip("driver does not implement fence.WaiterCounter")
	}
	key := s.key(t, "k")
	eventually := func(what string, want int) {
		t.Helper()
		deadline := time.Now().Add(s.slack())
		for {
			n, err := wc.Waiters(ctx, key)
			if err == nil && n == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("Waiters(%q) %s = %d, %v; want %d", key, what, n, err, want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	eventually("of a free key", 0)
	held := mustAcquire(t, ctx, a, key)
	eventually("of a held key nobody waits for", 0)
	waitCtx, giveUp := context.WithCancel(ctx)
	defer giveUp()
	type result struct {
		l   *fence.Lease
		err error
	}
	got := make(chan result, 2)
	for _, wctx := range []context.Context{ctx, waitCtx} {
		w := s.client(t)
		go func() {
			l, err := w.Acquire(wctx, key)
			got <- result{l, err}
		}()
	}
	eventually("with two contenders waiting", 2)
	giveUp()
	eventually("after one gave up", 1)
	mustRelease(t, ctx, held)
	eventually("once the last waiter holds the key", 0)
	for range 2 {
		r := <-got
		switch {
		case r.err == nil:
			mustRelease(t, ctx, r.l)
		case !errors.Is(r.err, context.Canceled):
			t.Errorf("waiter: %v", r.err)
		}
	}
}

func (s *suite) leftovers(t *testing.T) {
	if s.store.Leftovers == nil {
		t.Skip("Store.Leftovers not given")
	}
	ctx := s.ctx(t)
	// Session-bound stores and expiring leases may take up to a TTL to go.
	deadline := time.Now().Add(s.cfg.TTL + s.slack())
	for {
		left, err := s.store.Leftovers(ctx, s.prefix())
		if err != nil {
			t.Fatalf("Store.Leftovers: %v", err)
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after every lease was released and every wait ended, the store still holds: %q", left)
		}
		time.Sleep(s.cfg.TTL / 4)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// runPattern returns a -test.run pattern matching exactly the test name.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}
