package torture

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testkit/testserver"
)

func TestMain(m *testing.M) {
	if IsWorker() {
		os.Exit(WorkerMain())
	}
	if !long {
		maxEmptyTTL = 2 * time.Second
	}
	code := m.Run()
	registerEnv.Close()
	os.Exit(code)
}

// registerDB is the PostgreSQL of the postgres register, started once for
// every test of the package.
var registerDB = sync.OnceValues(func() (string, error) {
	return StartRegisterDB(registerEnv)
})

var registerEnv = testserver.NewEnv("torture-register", nil)

// long selects the full schedule (FENCE_TORTURE_LONG=1, a soak): every
// plan with the tool's own defaults (1 s TTL, 6 s), the plans of a store one
// after another, and the proof that the checker can fail on every store
// whose leases expire. The default is CI's short schedule: every fault
// against every store once, plans of a few seconds, the plans that leave
// the store alone side by side, and that proof on a few stores
// (proofStores).
var long = os.Getenv("FENCE_TORTURE_LONG") != ""

// short is one plan of the schedule: a few seconds, with generous timing
// for two shared cores and the race detector; the tool's defaults under
// the long schedule.
func short(f Fault, noGuard bool) Config {
	if long {
		return Config{Fault: f, NoGuard: noGuard, TTL: time.Second, Duration: 6 * time.Second, Work: 30 * time.Millisecond}
	}
	return Config{Fault: f, NoGuard: noGuard, TTL: 500 * time.Millisecond, Duration: 3 * time.Second, Work: 40 * time.Millisecond}
}

func openStore(t *testing.T, spec string) *Store {
	t.Helper()
	env := testserver.NewEnv("torture", &testLog{t})
	t.Cleanup(env.Close)
	var s *Store
	startIn(t, env, func(tb testing.TB) {
		var err error
		if s, err = OpenStore(spec, env); err != nil {
			tb.Fatalf("%v", err)
		}
	})
	t.Cleanup(s.Close)
	return s
}

type testLog struct{ t *testing.T }

func (l *testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

func run(t *testing.T, s *Store, cfg Config) *Result {
	t.Helper()
	if cfg.Register == "" {
		cfg.Register = RegisterPostgres
	}
	if cfg.Register == RegisterPostgres || cfg.Register == RegisterPostgresGuardOnly {
		dsn, err := registerDB()
		switch {
		case errors.Is(err, testserver.ErrUnavailable):
			testserver.Unavailable(t, "a PostgreSQL for the register: %v", err)
		case err != nil:
			t.Fatalf("a PostgreSQL for the register: %v", err)
		}
		cfg.RegisterDSN = dsn
	}
	cfg.LogDir = t.TempDir()
	cfg.HTMLDir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := Run(ctx, s, cfg)
	if err != nil {
		// A worker that could not start says why on its standard error.
		logWorkers(t, &Result{LogDir: cfg.LogDir})
		t.Fatalf("Run: %v", err)
	}
	t.Logf("%s", Table([]*Result{r}))
	return r
}

// runBiting runs the plan cfg on s up to three times, until bit says a
// run provoked what the test is about (a pause that landed on a holder
// about to write, an overlap past the slack). A run that did not bite
// proves nothing either way, so it is logged and run again; the last run
// comes back for the caller's checks, which fail it when none bit.
// missed holds the runs that did not bite, for a caller whose every run
// must also be clean.
func runBiting(t *testing.T, s *Store, cfg Config, bit func(*Result) bool) (last *Result, missed []*Result) {
	t.Helper()
	r := run(t, s, cfg)
	for try := 1; try < 3 && !bit(r); try++ {
		t.Logf("the plan did not bite (%d faults, %d overlaps, %d losses, %d stale writes refused, %d accepted, violations %q); again",
			r.Faults, r.Overlaps, r.Losses, r.StaleRefused, r.StaleAccepted, r.Violations)
		missed = append(missed, r)
		r = run(t, s, cfg)
	}
	return r, missed
}

// logWorkers shows the workers' logs of r's plan, for a failure.
// The verdict comes first and each log is cut to its last logTail lines:
// a failing plan's whole histories would bury it, and CI keeps only a
// part of a long output.
func logWorkers(t *testing.T, r *Result) {
	t.Helper()
	if len(r.Violations) > 0 {
		t.Logf("plan %s/%s: violations:\n%s", r.Store, r.Fault, strings.Join(r.Violations, "\n"))
	}
	entries, _ := os.ReadDir(r.LogDir)
	for _, e := range entries {
		b, _ := os.ReadFile(r.LogDir + "/" + e.Name())
		lines := strings.SplitAfter(strings.TrimRight(string(b), "\n"), "\n")
		switch {
		case len(b) == 0:
		case len(lines) > logTail:
			t.Logf("%s (its last %d of %d lines):\n%s", e.Name(), logTail, len(lines), strings.Join(lines[len(lines)-logTail:], ""))
		default:
			t.Logf("%s:\n%s", e.Name(), b)
		}
	}
}

// logTail is how many lines of each worker's log logWorkers shows.
const logTail = 40

// expectClean asserts a guarded plan found nothing wrong.
func expectClean(t *testing.T, r *Result) {
	t.Helper()
	if r.NA != "" {
		t.Skipf("not applicable: %s", r.NA)
	}
	if !r.OK() || r.StaleAccepted != 0 {
		logWorkers(t, r)
		t.Fatalf("guarded plan %s/%s failed: linearizable %s, %d stale writes accepted, violations:\n%s\nvisualization: %s",
			r.Store, r.Fault, r.Linearizable, r.StaleAccepted, strings.Join(r.Violations, "\n"), r.HTML)
	}
	if r.Acquisitions < 2 || r.Writes < 2 {
		logWorkers(t, r)
		t.Fatalf("plan %s/%s did too little to prove anything: %d acquisitions, %d writes", r.Store, r.Fault, r.Acquisitions, r.Writes)
	}
}

// stores are the stores every torture test covers: every store kind whose
// driver is in the build, each on a private server where it needs one
// (strict mode, FENCE_TEST_STRICT=1, fails when a server program is
// missing instead of skipping).
func stores() []string { return KindNames() }

// TestTorture runs every fault plan, guarded, against every store and
// expects a clean history: no stale write accepted, linearizable, tokens in
// order.
func TestTorture(t *testing.T) {
	t.Parallel()
	eachStore(t, stores(), func(t *testing.T, spec string) {
		s := openStore(t, spec)
		var shared, alone []string
		for _, f := range Faults {
			if f == FaultNone && !long {
				continue // every other plan runs the same workers, and more
			}
			if why := s.notApplicable(f); why != "" {
				if s.partitionMissing && f == FaultPartition && testserver.Strict() {
					t.Errorf("%s on %s: %s (FENCE_TEST_STRICT=1)", f, spec, why)
				}
				t.Logf("%s: not applicable to %s: %s", f, spec, why)
				continue
			}
			if f.hitsStore() {
				alone = append(alone, string(f))
			} else {
				shared = append(shared, string(f))
			}
		}
		plan := func(t *testing.T, f string) {
			r := run(t, s, short(Fault(f), false))
			expectClean(t, r) // overlaps beyond the fault's bound are violations
		}
		runPlans(t, s, shared, alone, plan)
	})
}

// runPlans runs a store's plans: those that leave the store alone
// (shared) have their own keys and workers, and run side by side;
// Azure's minute-long plans all at once. A plan that restarts or wipes
// the store (alone) runs alone.
func runPlans(t *testing.T, s *Store, shared, alone []string, plan func(t *testing.T, name string)) {
	n := plansAtOnce
	switch {
	case long:
		n = 1
	case s.minTTL > 0:
		n = len(shared)
	}
	inParallel(t, shared, n, plan)
	inParallel(t, alone, 1, plan)
}

// storesAtOnce is how many stores are tortured at the same time, and
// plansAtOnce how many plans of one store: plans mostly wait (on leases,
// on faults), so more than the two cores of CI's machines; a slow machine
// makes plans do less, never pass wrongly.
const (
	storesAtOnce = 3
	plansAtOnce  = 2
)

// slowStores start first, so that the longest store does not start last.
var slowStores = []string{"azblob", "k8s", "aztable", "dynamodb", "zk", "mysql"}

// eachStore runs f as a subtest per store, storesAtOnce at a time, the
// slow ones first.
func eachStore(t *testing.T, specs []string, f func(t *testing.T, spec string)) {
	specs = slices.Clone(specs)
	rank := func(s string) int {
		if i := slices.Index(slowStores, s); i >= 0 {
			return i
		}
		return len(slowStores)
	}
	slices.SortStableFunc(specs, func(a, b string) int { return rank(a) - rank(b) })
	inParallel(t, specs, storesAtOnce, f)
}

// inParallel runs f as a subtest per name, n at a time, started in order.
func inParallel(t *testing.T, names []string, n int, f func(t *testing.T, name string)) {
	sem := make(chan struct{}, max(n, 1))
	var wg sync.WaitGroup
	for _, name := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			t.Run(name, func(t *testing.T) { f(t, name) })
		})
	}
	wg.Wait()
}

// TestPauseBites: the pause plan really makes a paused holder's writes
// stale on stores whose leases expire (on session-bound stores, such as
// lock files, a stopped holder keeps the lock and nobody else gets it).
func TestPauseBites(t *testing.T) {
	t.Parallel()
	s := openStore(t, "mem")
	r, missed := runBiting(t, s, short(FaultPause, false), func(r *Result) bool { return r.Overlaps > 0 && r.StaleRefused > 0 })
	for _, m := range missed {
		expectClean(t, m)
	}
	expectClean(t, r)
	if r.Overlaps == 0 || r.StaleRefused == 0 {
		t.Errorf("the pause plan caused %d overlaps and %d refused stale writes; want some of each", r.Overlaps, r.StaleRefused)
	}
}

// TestNoGuardShowsCorruption is the proof that the checker can fail:
// without the guard, the pause plan must end in accepted stale writes and a
// history that is not linearizable.
func TestNoGuardShowsCorruption(t *testing.T) {
	t.Parallel()
	eachStore(t, proofStores(), func(t *testing.T, spec string) {
		s := openStore(t, spec)
		// A pause may land on no holder about to write (it released
		// first, its write fell outside the overlap, or the machine was
		// too slow for an episode to fit).
		r, _ := runBiting(t, s, short(FaultPause, true), func(r *Result) bool { return r.StaleAccepted > 0 })
		if r.StaleAccepted == 0 || r.Linearizable != "Illegal" || r.OK() {
			logWorkers(t, r)
			t.Fatalf("without the guard the pause plan shows %d accepted stale writes and linearizable=%s; want the corruption shown",
				r.StaleAccepted, r.Linearizable)
		}
		if r.HTML == "" {
			t.Error("no visualization written for the failing history")
		} else if fi, err := os.Stat(r.HTML); err != nil || fi.Size() == 0 {
			t.Errorf("visualization %s: %v", r.HTML, err)
		}
	})
}

// ttlStores are the stores whose leases expire while their holder is
// stopped: where the pause plan makes two holders. On the others the lock
// is bound to the holder's connection or process, which a pause keeps.
// Azure's 15 s leases make a plan there last a minute: its guarded pause
// plan runs in TestTorture; the proof that the checker can fail is made on
// the others.
func ttlStores() []string {
	var out []string
	for _, s := range stores() {
		if !kinds[s].sessionBound && kinds[s].scheme != "azblob+http" {
			out = append(out, s)
		}
	}
	return out
}

// proofStores are the stores the no-guard proof runs on: every store whose
// leases expire under the long schedule; under the short one, the tool's
// own memory store, a counter store, an SQL store and every cluster (the
// checker is the same for every store; what differs is only how the pause
// makes two holders, which the guarded pause plans show on every store;
// clusters are where users meet two holders, so each shows the corruption
// that the guard prevents).
func proofStores() []string {
	all := ttlStores()
	if long {
		return all
	}
	var out []string
	for _, s := range all {
		if s == "mem" || s == "redis" || s == "postgres" || kinds[s].cluster {
			out = append(out, s)
		}
	}
	return out
}

// TestMemoryRegister: the in-memory register, behind a fence.MemoryGuard,
// keeps the same promises, and fails the same way without the guard.
func TestMemoryRegister(t *testing.T) {
	t.Parallel()
	s := openStore(t, "mem")
	for _, noGuard := range []bool{false, true} {
		cfg := short(FaultPause, noGuard)
		cfg.Register = RegisterMemory
		r := run(t, s, cfg)
		if !noGuard {
			expectClean(t, r)
		} else if r.StaleAccepted == 0 || r.OK() {
			logWorkers(t, r)
			t.Fatalf("memory register without the guard: %d stale writes accepted, linearizable %s; want the corruption shown", r.StaleAccepted, r.Linearizable)
		}
	}
}

// TestWipeCatchesTokenReset is the proof that the wipe plan can fail: a
// store whose tokens start over at 1 once its state is wiped (the mem
// store, deliberately broken) fails it, with tokens that went back; the
// guard still refuses every write of the holders of the small tokens.
func TestWipeCatchesTokenReset(t *testing.T) {
	t.Parallel()
	srv, err := newMemServer()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	srv.forgetTokens = true
	s := &Store{
		Name:  "mem-forgets-tokens",
		addrs: []string{srv.Addr()},
		url:   func(addrs []string, _ time.Duration) string { return MemScheme + "://" + addrs[0] },
		wipe:  srv.wipe,
	}
	r := run(t, s, short(FaultWipe, false))
	went := strings.Contains(strings.Join(r.Violations, "\n"), "went back")
	if r.OK() || !went || r.StaleAccepted != 0 || r.StaleRefused == 0 {
		logWorkers(t, r)
		t.Fatalf("a store whose tokens restart at 1 after a wipe: OK %v, tokens went back %v, %d stale writes accepted, %d refused; want the reset caught, and refused by the guard (violations %q)",
			r.OK(), went, r.StaleAccepted, r.StaleRefused, r.Violations)
	}
}

// TestGuardOnlyRegister: with the postgres register's own row lock gone,
// only the guard orders the writes of a key. fencepg's guard keeps the
// pause plan clean; a deliberately non-atomic guard (it reads the highest
// token, waits, then writes its own) lets a paused holder's write through
// after a newer one: the plan fails. The worker's slow step is short, the
// write waits after the guard's check, and the pause comes a moment after
// the grant: it lands in that wait, the check done, the write to come.
func TestGuardOnlyRegister(t *testing.T) {
	t.Parallel()
	s := openStore(t, "mem")
	cfg := short(FaultPause, false)
	cfg.Register = RegisterPostgresGuardOnly
	cfg.Work = time.Millisecond
	cfg.writeTimeout = 10 * cfg.TTL        // a paused write must not time out
	cfg.guardWait = 150 * time.Millisecond // a slow write after the guard's check
	cfg.pauseAt = 50 * time.Millisecond    // into that wait
	r := run(t, s, cfg)
	expectClean(t, r)

	cfg.brokenGuard = true
	r, _ = runBiting(t, s, cfg, func(r *Result) bool { return r.StaleAccepted > 0 }) // a pause in the broken guard's wait
	if r.StaleAccepted == 0 || r.OK() {
		logWorkers(t, r)
		t.Fatalf("guard-only register with a non-atomic guard: %d stale writes accepted, OK %v; want the race shown", r.StaleAccepted, r.OK())
	}
}

// TestClockJumpBites: on the stores that time leases by their own wall
// clock (PostgreSQL lease mode, Redis), the clock-jump plan ends a
// holder's lease under it: holders overlap, the guard refuses the stale
// writes, and without the guard they corrupt the register. It is the
// proof that the plan's jump reaches the server and that its checks can
// fail.
func TestClockJumpBites(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"postgres", "redis"} {
		t.Run(spec, func(t *testing.T) {
			t.Parallel()
			s := openStore(t, spec)
			if why := s.notApplicable(FaultClockJump); why != "" {
				testserver.Unavailable(t, "clock-jump on %s: %s", spec, why) // a failure under FENCE_TEST_STRICT=1
			}
			for _, noGuard := range []bool{false, true} {
				// A jump bites when a waiter tries before the holder's
				// next renewal is refused: more waiters, more episodes.
				cfg := short(FaultClockJump, noGuard)
				cfg.Workers = 6
				cfg.Duration *= 2
				r, _ := runBiting(t, s, cfg, func(r *Result) bool { // a stale write after a jump
					return r.Overlaps > 0 && (noGuard || r.StaleRefused > 0) && (!noGuard || r.StaleAccepted > 0)
				})
				switch {
				case !noGuard:
					expectClean(t, r)
					if r.Overlaps == 0 || r.StaleRefused == 0 {
						logWorkers(t, r)
						t.Errorf("guarded clock-jump plan: %d overlaps, %d stale writes refused; want some of each: the jump did not end a lease early", r.Overlaps, r.StaleRefused)
					}
				case r.StaleAccepted == 0 || r.OK():
					logWorkers(t, r)
					t.Errorf("clock-jump plan without the guard: %d stale writes accepted, OK %v; want the corruption shown", r.StaleAccepted, r.OK())
				}
			}
		})
	}
}

// TestTortureKinds runs the semaphore and reader-writer plans, guarded,
// and expects them clean: never more workers than the limit believing
// they hold a slot, never a writer beside another holder (beyond each
// fault's bound, as for locks), tokens in order, no stale write
// accepted. Under the short schedule: every fault on the tool's memory
// store and on lock files (kindStores), and a fault that loses the
// store's state and one that moves its clock on the server stores that
// do these kinds (kindServerStores, kindFaults); under the long one every
// fault on every store.
func TestTortureKinds(t *testing.T) {
	t.Parallel()
	specs := stores()
	if !long {
		specs = slices.DeleteFunc(specs, func(s string) bool {
			return !slices.Contains(kindStores, s) && !slices.Contains(kindServerStores, s)
		})
	}
	eachStore(t, specs, func(t *testing.T, spec string) {
		s := openStore(t, spec)
		var shared, alone []string
		for _, k := range []LeaseKind{KindSemaphore, KindRW} {
			why, err := s.supports(context.Background(), k)
			if err != nil {
				t.Fatal(err)
			}
			if why != "" {
				t.Logf("%s: not applicable to %s: %s", k, spec, why)
				continue
			}
			for _, f := range kindFaults(spec, s) {
				if why := s.notApplicable(f); why != "" {
					t.Logf("%s %s: not applicable to %s: %s", k, f, spec, why)
					continue
				}
				name := string(k) + "-" + string(f)
				if f.hitsStore() {
					alone = append(alone, name)
				} else {
					shared = append(shared, name)
				}
			}
		}
		plan := func(t *testing.T, name string) {
			k, f, _ := strings.Cut(name, "-")
			cfg := short(Fault(f), false)
			cfg.Kind = LeaseKind(k)
			expectClean(t, run(t, s, cfg))
		}
		runPlans(t, s, shared, alone, plan)
	})
}

// kindStores are the stores on which the short schedule runs every
// semaphore and reader-writer plan: the core's waiting, renewal and
// validity are the same for every store, and these two need no server.
var kindStores = []string{"mem", "file"}

// kindServerStores are the server stores whose drivers do semaphores or
// reader-writer locks (fence.KindSupporter). The short schedule runs the
// plans only there: on the others every plan is n/a, found so only after
// their servers (a kube-apiserver, an Azurite) have started. The long
// schedule tries every store, and finds a driver that learned a kind.
var kindServerStores = []string{"redis", "redis-cluster", "postgres", "postgres-session", "etcd", "etcd-cluster", "zk"}

// kindFaults are the faults of the semaphore and reader-writer plans on
// s: every fault under the long schedule and on kindStores; on the server
// stores, under the short one, those that lose the store's state (its
// driver's own bookkeeping of slots and readers, and tokens that must not
// go back) or move its clock. A wipe loses the state at once; an empty
// restart only where the tool cannot wipe, as the server's start may
// outlast a short plan (a Redis Cluster, CLUSTERDOWN until the plan's
// end on a loaded machine).
func kindFaults(spec string, s *Store) []Fault {
	if long || slices.Contains(kindStores, spec) {
		return slices.DeleteFunc(slices.Clone(Faults), func(f Fault) bool { return f == FaultNone && !long })
	}
	if s.notApplicable(FaultWipe) != "" {
		return []Fault{FaultRestartEmpty, FaultClockJump}
	}
	return []Fault{FaultWipe, FaultClockJump}
}

// TestTooManyHoldersCaught is the proof that the semaphore and
// reader-writer checks can fail: on a mem store deliberately broken to
// grant a semaphore one slot more than asked, or a writer the read side
// (beside readers and other writers), the baseline plan, where no
// overlap may be, fails.
func TestTooManyHoldersCaught(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		kind   LeaseKind
		store  string
		broken func(*memServer)
		want   string
	}{
		{KindSemaphore, "mem-semaphore-one-more", func(s *memServer) { s.semaphoreOneMore = true }, "more than 2 workers believed they held a slot"},
		{KindRW, "mem-writer-shares", func(s *memServer) { s.writerShares = true }, "a writer believed it held the key"},
	} {
		t.Run(string(c.kind), func(t *testing.T) {
			t.Parallel()
			srv, err := newMemServer()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = srv.Close() })
			c.broken(srv)
			s := &Store{
				Name:  c.store,
				addrs: []string{srv.Addr()},
				url:   func(addrs []string, _ time.Duration) string { return MemScheme + "://" + addrs[0] },
			}
			cfg := short(FaultNone, false)
			cfg.Kind = c.kind
			// The extra holder may come and go within the slack.
			r, _ := runBiting(t, s, cfg, func(r *Result) bool { return !r.OK() })
			if all := strings.Join(r.Violations, "\n"); r.OK() || !strings.Contains(all, c.want) || r.StaleAccepted != 0 {
				logWorkers(t, r)
				t.Fatalf("a store that lets in one holder too many: OK %v, %d overlaps, %d stale writes accepted; want a violation with %q (violations %q)",
					r.OK(), r.Overlaps, r.StaleAccepted, c.want, r.Violations)
			}
			t.Logf("caught: %s", strings.Join(r.Violations, "; "))
		})
	}
}

// lossMarking is the proof that a failover which loses a lease is
// accounted for, and no more. For marked true and false, open gives the
// store (nil when its server is unavailable here: a skip, or a failure
// under FENCE_TEST_STRICT=1) with a failover that loses a lease on
// purpose and reports the kill as the loss when marked, as a plain start
// otherwise; the restart plan of cfg (tried up to three times for an
// overlap) must then be clean when marked, and fail with the overlap
// reported when not. In both, no token may go back.
func lossMarking(t *testing.T, cfg Config, open func(t *testing.T, env *testserver.Env, marked bool) *Store) {
	for _, marked := range []bool{true, false} {
		t.Run(fmt.Sprintf("marked=%v", marked), func(t *testing.T) {
			t.Parallel()
			env := testserver.NewEnv("torture-loss-marking", &testLog{t})
			t.Cleanup(env.Close)
			s := open(t, env, marked)
			// A worker must be granted the key while the lost lease's
			// holder believes in it.
			r, _ := runBiting(t, s, cfg, func(r *Result) bool { return r.Overlaps > 0 })
			if r.Overlaps == 0 {
				logWorkers(t, r)
				t.Fatalf("three restart plans with a failover that loses a lease made no overlap: the failover lost no lease anyone saw")
			}
			if r.TokenRegressions != 0 {
				t.Errorf("%d tokens went back across the failover that lost a lease; want none", r.TokenRegressions)
			}
			if marked {
				expectClean(t, r)
				return
			}
			if r.OK() || !strings.Contains(strings.Join(r.Violations, "\n"), "overlapping leases") {
				logWorkers(t, r)
				t.Fatalf("a lost lease's overlap, not marked as a loss: OK %v, violations %q; want the overlap reported", r.OK(), r.Violations)
			}
			t.Logf("caught: %s", strings.Join(r.Violations, "; "))
		})
	}
}

// startIn starts a server in env (start calls the testserver starter);
// a server whose program is missing here skips the test, or fails it
// under FENCE_TEST_STRICT=1; one present but broken always fails it.
func startIn(t *testing.T, env *testserver.Env, start func(tb testing.TB)) {
	t.Helper()
	err := env.Do(start)
	switch {
	case errors.Is(err, testserver.ErrUnavailable):
		testserver.Unavailable(t, "%v", err)
	case err != nil:
		t.Fatal(err)
	}
}
