package fencetest_test

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testkit/leakcheck"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
	"github.com/fencing/fence/fencetest"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// The suite must catch broken drivers. Each driver in broken (mutants_test.go)
// is one of two unbroken bases with one rule of the contract broken. The
// self-test runs, each in a child process, the whole suite against both
// bases, which must pass, and against every broken driver the checks
// named for it, which must all fail.

// base is what a broken driver is built on.
type base struct {
	store *fencemem.Store
	sess  *sessionDriver // the session base; nil for the plain one
	// wipe is Store.Wipe: fencemem keeps its counters apart from its
	// leases, as a store seeded from a clock would never lose them, so
	// dropping the lease is all a wipe can do to it. Broken drivers that
	// number tokens themselves replace it.
	wipe func(ctx context.Context, key string) error
}

// brokenDriver is one rule broken.
type brokenDriver struct {
	session bool                       // built on the session base
	build   func(b *base) fence.Driver // the broken driver
	catch   []string                   // the suite's checks that must fail
	// why is a piece of the message the checks must fail with: the
	// reason meant, not another one (a timeout, a side effect).
	why string
	// perClient builds a driver on every Open, for broken drivers whose
	// state is one client's (its session); build then runs once per Open.
	perClient bool
}

// baselines are the unbroken bases: the whole suite must pass on them.
var baselines = map[string]brokenDriver{
	"baseline":         {build: func(b *base) fence.Driver { return b.store }},
	"baseline-session": {session: true, build: func(b *base) fence.Driver { return b.sess }},
}

const envBroken = "FENCETEST_SELFTEST_BROKEN"

func TestSuiteCatchesBrokenDrivers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the suite once per broken driver")
	}
	// The children spend most of their time waiting out a check's slack,
	// not on a CPU, so more of them run at once than -test.parallel (the
	// number of CPUs) would allow: each subtest starts its child before
	// it pauses in t.Parallel.
	limit := make(chan struct{}, 6)
	start := func(name string, checks []string) <-chan childResult {
		ch := make(chan childResult, 1)
		go func() {
			limit <- struct{}{}
			defer func() { <-limit }()
			out, err := runBroken(name, checks)
			ch <- childResult{out, err}
		}()
		return ch
	}
	for _, name := range slices.Sorted(maps.Keys(baselines)) {
		t.Run(name, func(t *testing.T) {
			res := start(name, nil)
			t.Parallel()
			if r := <-res; r.err != nil {
				t.Fatalf("the suite fails the unbroken driver %q (%v); output:\n%s", name, r.err, r.out)
			}
		})
	}
	for _, name := range slices.Sorted(maps.Keys(broken)) {
		b := broken[name]
		t.Logf("%s must be caught by %s", name, strings.Join(b.catch, ", "))
		t.Run(name, func(t *testing.T) {
			if b.why == "" {
				t.Fatalf("the broken driver %q names no reason to be caught for (brokenDriver.why)", name)
			}
			res := start(name, b.catch)
			t.Parallel()
			r := <-res
			if r.err == nil {
				t.Fatalf("the suite passed the broken driver %q; output:\n%s", name, r.out)
			}
			for _, check := range b.catch {
				if !strings.Contains(r.out, "--- FAIL: TestBrokenDriver/"+check+" ") {
					t.Errorf("check %s did not fail for the broken driver %q; output:\n%s", check, name, r.out)
				}
			}
			if !strings.Contains(r.out, b.why) {
				t.Errorf("the broken driver %q was caught, but not for the reason meant: no %q in the output:\n%s", name, b.why, r.out)
			}
		})
	}
}

// childResult is what a child process running TestBrokenDriver printed,
// and how it exited.
type childResult struct {
	out string
	err error
}

// runBroken runs TestBrokenDriver in a child process, on the checks named
// (all of them for none): only the subtests named where every check
// names one, else the whole checks.
func runBroken(name string, checks []string) (string, error) {
	run := "^TestBrokenDriver$"
	if len(checks) > 0 {
		var top, sub []string
		allSub := true
		for _, c := range checks {
			c, s, ok := strings.Cut(c, "/")
			top = appendPattern(top, c)
			if ok {
				sub = appendPattern(sub, s)
			} else {
				allSub = false
			}
		}
		run += "/^(" + strings.Join(top, "|") + ")$"
		if allSub {
			run += "/^(" + strings.Join(sub, "|") + ")$"
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+run, "-test.v", "-test.count=1", "-test.parallel=4")
	cmd.Env = append(os.Environ(), envBroken+"="+name)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// appendPattern adds the pattern of name to ps, once.
func appendPattern(ps []string, name string) []string {
	if p := regexp.QuoteMeta(name); !slices.Contains(ps, p) {
		return append(ps, p)
	}
	return ps
}

// TestBrokenDriver runs the suite against the driver named in the
// environment; it runs only as a child of TestSuiteCatchesBrokenDrivers.
func TestBrokenDriver(t *testing.T) {
	name := os.Getenv(envBroken)
	if name == "" {
		t.Skip("runs only as a child of TestSuiteCatchesBrokenDrivers")
	}
	bd, ok := baselines[name]
	if !ok {
		bd, ok = broken[name]
	}
	if !ok {
		t.Fatalf("no driver %q", name)
	}
	b := &base{store: fencemem.New()}
	b.wipe = func(_ context.Context, key string) error {
		b.store.Delete(key)
		return nil
	}
	if bd.session {
		b.sess = newSessionDriver(b.store)
	}
	open := func() fence.Driver { return bd.build(b) }
	if !bd.perClient {
		drv := bd.build(b)
		open = func() fence.Driver { return drv }
	}
	fencetest.Run(t, fencetest.Config{
		SingleProcess: true,
		TTL:           300 * time.Millisecond,
		Setup: func(t *testing.T) fencetest.Store {
			st := fencetest.Store{
				Delete: func(_ context.Context, key string) error {
					b.store.Delete(key)
					return nil
				},
				Wipe: func(ctx context.Context, key string) error { return b.wipe(ctx, key) },
				Leftovers: func(ctx context.Context, prefix string) ([]string, error) {
					hs, err := b.store.List(ctx, prefix)
					var left []string
					for _, h := range hs {
						left = append(left, h.Key)
					}
					return left, err
				},
			}
			if b.sess != nil {
				st.KillSession = b.sess.kill
				st.Outage = b.sess.outage
			}
			return st
		},
		Open: func(string) (fence.Driver, func() error, error) { return open(), nil, nil },
	})
}
