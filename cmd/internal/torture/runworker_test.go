package torture

import (
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// fenceBuilds serializes the tests' builds of fence: each is a go build
// of cmd/fence, and two cores are enough for one.
var fenceBuilds sync.Mutex

func testFence(t *testing.T, patches ...fencePatch) string {
	t.Helper()
	fenceBuilds.Lock()
	defer fenceBuilds.Unlock()
	start := time.Now()
	bin, err := buildFence(t.TempDir(), patches)
	if err != nil {
		t.Fatalf("building fence: %v", err)
	}
	t.Logf("built fence in %v (race detector: %v)", time.Since(start).Round(time.Millisecond), raceBuild())
	return bin
}

// fenceRunPlans are the fence-run worker's plans in CI's short schedule:
// on the tool's memory store, on lock files (where a pause keeps the
// lock: nobody else gets it, and fence run must not lose it), on a
// private Redis, whose restart loses every lease, on PostgreSQL, whose
// clock ends a lease early, and on an etcd cluster whose member under
// fence run is cut off.
var fenceRunPlans = map[string][]Fault{
	"mem":          {FaultPause, FaultKill, FaultBlackhole},
	"file":         {FaultPause, FaultKill},
	"redis":        {FaultPause, FaultBlackhole, FaultRestart},
	"postgres":     {FaultClockJump},
	"etcd-cluster": {FaultPartition},
}

// fenceRunPlan is a fence-run plan of the schedule. A fence run's lease
// lasts two TTLs (Config.Writes), and each starts two processes: the
// plan runs twice as long as a library worker's, for episodes to fit.
func fenceRunPlan(f Fault, bin string) Config {
	cfg := short(f, false)
	cfg.Worker, cfg.Fence = WorkerFenceRun, bin
	cfg.Duration *= 2
	return cfg
}

// TestFenceRunWorker runs plans whose leases `fence run` holds, and
// whose writes the command it runs makes with FENCE_TOKEN, and expects
// them clean: the register's checks, and checkFenceRun's (exit 76 for a
// reported loss and only then, the command's status otherwise, the
// command stopped within its bound of a reported loss or fence run's
// death, a lease given away reported lost). On mem the pause must bite:
// losses reported, and stale writes of a command running on without its
// stalled fence run refused by the guard.
func TestFenceRunWorker(t *testing.T) {
	t.Parallel()
	bin := testFence(t)
	specs := make([]string, 0, len(fenceRunPlans))
	for s := range fenceRunPlans {
		specs = append(specs, s)
	}
	slices.Sort(specs)
	eachStore(t, specs, func(t *testing.T, spec string) {
		s := openStore(t, spec)
		var shared, alone []string
		for _, f := range fenceRunPlans[spec] {
			if why := s.notApplicable(f); why != "" {
				t.Fatalf("%s on %s: %s", f, spec, why)
			}
			if f.hitsStore() {
				alone = append(alone, string(f))
			} else {
				shared = append(shared, string(f))
			}
		}
		runPlans(t, s, shared, alone, func(t *testing.T, f string) {
			cfg := fenceRunPlan(Fault(f), bin)
			if spec != "redis" {
				cfg.Register = RegisterMemory
			}
			// On mem, the pause must also show both ends of a loss: the
			// report, and a stale write the guard refused. The command
			// writes stale only after the command of the fence run next
			// granted the key has written, and fence runs and their
			// commands start slowly on a loaded machine (race-built, a
			// process each): so the pause lasts 8 TTL instead of 2, and
			// the command writes on for 10 TTL, past the pause. Whether
			// it writes before fence run stops it is still up to the
			// scheduler: an episode may show only the loss.
			mustBite := spec == "mem" && f == string(FaultPause)
			if mustBite {
				cfg.cutFor = 8 * cfg.TTL
				cfg.Work = 40 * time.Millisecond
				cfg.Writes = int(10*cfg.TTL/cfg.Work) + 1
				cfg.Duration = max(cfg.Duration, 12*cfg.TTL+cfg.cutFor)
			}
			bit := func(r *Result) bool { return !mustBite || (r.Losses > 0 && r.StaleRefused > 0) }
			r, missed := runBiting(t, s, cfg, func(r *Result) bool { return r.Faults > 0 && bit(r) })
			for _, m := range missed {
				expectClean(t, m)
			}
			expectClean(t, r)
			if r.Faults == 0 {
				t.Fatalf("no fault episode fitted in three plans: they prove nothing")
			}
			if !bit(r) {
				logWorkers(t, r)
				t.Errorf("the pause of fence run caused %d reported losses and %d refused stale writes; want some of each", r.Losses, r.StaleRefused)
			}
		})
	})
}

// TestFenceRunBroken is the proof that checkFenceRun can fail: fence
// built deliberately broken (its source patched in the build only, see
// fencePatch) fails the check written for what it breaks.
func TestFenceRunBroken(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		fault   Fault
		patches []fencePatch
		want    string
	}{{
		// On a loss it says so, and lets its command run on.
		name:  "does-not-stop",
		fault: FaultPause,
		patches: []fencePatch{{File: "run.go",
			Old: "\t\t\tev.emit(e, true)\n\t\t\tsignalCmd(syscall.SIGTERM)\n\t\t\tkill = time.After(f.grace)\n",
			New: "\t\t\tev.emit(e, true)\n"}},
		want: "after fence run reported the loss",
	}, {
		// It stops its command, and exits with the command's status.
		name:  "exits-with-command-status",
		fault: FaultPause,
		patches: []fencePatch{{File: "run.go",
			Old: "\t\t\t\t_ = l.Release(context.Background())\n\t\t\t\treturn exitLost\n",
			New: "\t\t\t\t_ = l.Release(context.Background())\n\t\t\t\treturn code\n"}, {File: "run.go",
			Old: "\t\t\t\treportLostAfter(l, f, pid, code, during, err, ev)\n\t\t\t\treturn exitLost\n",
			New: "\t\t\t\treportLostAfter(l, f, pid, code, during, err, ev)\n\t\t\t\treturn code\n"}},
		want: "reported its lease lost but exited",
	}, {
		// It never learns of a loss: not from its lease, not from its
		// release.
		name:  "deaf",
		fault: FaultPause,
		patches: []fencePatch{{File: "run.go",
			Old: "\t\t\tlost = l.Err()\n\t\t\tif !errors.Is(lost, fence.ErrLost) {\n",
			New: "\t\t\tlost = nil\n\t\t\tif true {\n"}, {File: "run.go",
			Old: "if err := release(l, ev); errors.Is(err, fence.ErrLost) {",
			New: "if err := release(l, ev); err != nil && false {"}},
		want: "a lost lease not reported",
	}, {
		// Its command does not die with it.
		name:    "no-parent-death-signal",
		fault:   FaultKill,
		patches: []fencePatch{{File: "proc_linux.go", Old: "Pdeathsig: syscall.SIGKILL", New: "Pdeathsig: 0"}},
		want:    "after its fence run was killed",
	}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			bin := testFence(t, c.patches...)
			s := openStore(t, "mem")
			cfg := fenceRunPlan(c.fault, bin)
			cfg.Register = RegisterMemory
			// An episode may not reach what the patch breaks (a pause
			// that ended after the command did).
			has := func(r *Result) bool { return strings.Contains(strings.Join(r.Violations, "\n"), c.want) }
			r, _ := runBiting(t, s, cfg, has)
			if r.OK() || !has(r) || r.StaleAccepted != 0 {
				logWorkers(t, r)
				t.Fatalf("a fence run broken so (%s): OK %v, %d stale writes accepted; want a violation with %q (violations %q)",
					c.name, r.OK(), r.StaleAccepted, c.want, r.Violations)
			}
			t.Logf("caught: %s", strings.Join(r.Violations, "; "))
		})
	}
}

// TestCheckFenceRun feeds checkFenceRun crafted histories: a clean
// one, and one for each way fence run can go wrong.
func TestCheckFenceRun(t *testing.T) {
	const ms = int64(time.Millisecond)
	ttl := 500 * time.Millisecond // stopBound 100ms, slack 50ms
	code := func(c int) *int { return &c }
	// A fence run of worker 0 on k, token 5, from 10ms to 1s, then
	// another worker's grant of token 6 at g.
	history := func(end RunEnd, lostAt, killAt, lastWrite, g int64) []Event {
		ev := []Event{
			{W: 0, Op: OpAcquire, Ph: Call, ID: 1, T: 0, Key: "k"},
			{W: 0, Op: OpAcquire, Ph: Ret, ID: 1, T: 10 * ms, Key: "k", Token: 5, Res: ResOK, Valid: validUnknown},
			{W: 0, Op: OpWrite, Ph: Call, ID: 2, T: lastWrite, Key: "k", Token: 5},
		}
		if lostAt != 0 {
			ev = append(ev, Event{W: 0, Op: OpLost, T: lostAt, Key: "k", Token: 5})
		}
		if killAt != 0 {
			ev = append(ev, Event{W: 0, Op: OpKillRun, T: killAt})
		}
		ev = append(ev,
			Event{W: 0, Op: OpRelease, Ph: Call, ID: 3, T: 1000 * ms, Key: "k", Token: 5},
			// The worker adds OpRun once it has its command's last event.
			Event{W: 0, Op: OpRun, T: max(1001*ms, lastWrite+ms), Key: "k", Token: 5, Run: &end},
			Event{W: 1, Op: OpAcquire, Ph: Ret, ID: 1, T: g, Key: "k", Token: 6, Res: ResOK})
		slices.SortStableFunc(ev, func(a, b Event) int { return int(a.T - b.T) })
		return ev
	}
	ok := RunEnd{Exit: 0, Acquired: true, Command: code(0), Died: 1001 * ms}
	lost := RunEnd{Exit: 76, Acquired: true, Command: code(143), Died: 1001 * ms}
	for _, c := range []struct {
		name   string
		events []Event
		want   string // "" for clean
	}{
		{"clean", history(ok, 0, 0, 500*ms, 1100*ms), ""},
		{"clean loss", history(lost, 600*ms, 0, 650*ms, 700*ms), ""},
		{"clean kill", history(RunEnd{Exit: 137, Acquired: true, Died: 1001 * ms}, 0, 600*ms, 650*ms, 1100*ms), ""},
		{"loss, exit 0", history(RunEnd{Exit: 0, Acquired: true, Command: code(0), Died: 1001 * ms}, 600*ms, 0, 500*ms, 1100*ms), "reported its lease lost but exited 0"},
		{"exit 76, no loss", history(RunEnd{Exit: 76, Acquired: true, Command: code(0), Died: 1001 * ms}, 0, 0, 500*ms, 1100*ms), "exited 76 without reporting a loss"},
		{"not the command's status", history(RunEnd{Exit: 1, Acquired: true, Command: code(0), Died: 1001 * ms}, 0, 0, 500*ms, 1100*ms), "exited 1 where its command exited 0"},
		{"no exited event", history(RunEnd{Exit: 0, Acquired: true, Died: 1001 * ms}, 0, 0, 500*ms, 1100*ms), "no exited event"},
		{"write after the loss", history(lost, 600*ms, 0, 750*ms, 700*ms), "after fence run reported the loss"},
		{"write after the kill", history(RunEnd{Exit: 137, Acquired: true, Died: 1001 * ms}, 0, 600*ms, 750*ms, 1100*ms), "after its fence run was killed"},
		{"write after the end", history(ok, 0, 0, 1200*ms, 1300*ms), "after fence run ended"},
		{"lease given away", history(ok, 0, 0, 500*ms, 700*ms), "a lost lease not reported"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := checkFenceRun(c.events, ttl)
			switch {
			case c.want == "" && len(v) > 0:
				t.Errorf("violations %q; want none", v)
			case c.want != "" && !strings.Contains(strings.Join(v, "\n"), c.want):
				t.Errorf("violations %q; want one with %q", v, c.want)
			}
		})
	}
}
