package recordtest

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
)

// catchMutants shows that the suite can fail: it runs, each in a child
// process with the mutant set, the tests of run (the name of the test
// calling Run) that must catch the mutant, and checks that they fail, for
// the reason meant.
func catchMutants[S Store](t *testing.T, run string, mutants map[string]Mutant[S]) {
	for _, name := range slices.Sorted(maps.Keys(mutants)) {
		m := mutants[name]
		t.Run(name, func(t *testing.T) {
			if len(m.Catch) == 0 || m.Why == "" {
				t.Fatalf("the mutant %q names no test to catch it (Catch) or no reason (Why)", name)
			}
			out, err := runMutant(run, name, m.Catch)
			if err == nil {
				t.Fatalf("the suite passed the mutant %q; output:\n%s", name, out)
			}
			for _, test := range m.Catch {
				if !strings.Contains(out, "--- FAIL: "+run+"/"+test+" ") {
					t.Errorf("%s did not fail on the mutant %q; output:\n%s", test, name, out)
				}
			}
			if !strings.Contains(out, m.Why) {
				t.Errorf("the mutant %q was caught, but not for the reason meant: no %q in the output:\n%s", name, m.Why, out)
			}
		})
	}
}

// runMutant runs the tests named of run in a child process with the
// mutant set.
func runMutant(run, mutant string, tests []string) (string, error) {
	var parts, ps []string
	for _, p := range strings.Split(run, "/") {
		parts = append(parts, "^"+regexp.QuoteMeta(p)+"$")
	}
	for _, test := range tests {
		ps = append(ps, regexp.QuoteMeta(test))
	}
	pattern := strings.Join(parts, "/") + "/^(" + strings.Join(ps, "|") + ")$"
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run="+pattern, "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), envMutant+"="+mutant)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// mutants returns h.Mutants and the suite's own mutants of the harness:
// hooks that do nothing, which the tests relying on them must notice
// rather than pass without having tested anything.
func mutants[S Store](t *testing.T, h Harness[S]) map[string]Mutant[S] {
	noop := func(context.Context, S, string) error { return nil }
	refused := func(how string) string {
		return "Extend of the lease whose " + h.Record + " was " + how + ": <nil>; want ErrNotHeld"
	}
	ms := map[string]Mutant[S]{
		"harness-delete-does-nothing": {
			Set:   func(h *Harness[S]) func() { h.Delete = noop; return func() {} },
			Catch: []string{tokensSurviveDeleted(h)}, Why: refused("deleted"),
		},
		"harness-strip-does-nothing": {
			Set:   func(h *Harness[S]) func() { h.Strip = noop; return func() {} },
			Catch: []string{tokensSurviveDeleted(h)}, Why: refused("overwritten without its counter"),
		},
		"harness-test-hook-does-nothing": {
			Set: func(h *Harness[S]) func() {
				h.SetTestHook = func(func(string)) func() { return func() {} }
				return func() {}
			},
			Catch: []string{"LostRaceBeforeWrite", "LostInsertRace", "CancelledAcquireLeavesNothing", "RetriedWriteThatLanded"},
			Why:   "did not run",
		},
	}
	if h.SetDelayMutant == nil {
		t.Fatal("the harness has no SetDelayMutant to show the lock-delay checks can fail")
	}
	delayMutant := func(mutant string) func(h *Harness[S]) func() {
		return func(h *Harness[S]) func() { return h.SetDelayMutant(mutant) }
	}
	ms["lock-delay-ignored"] = Mutant[S]{
		Set: delayMutant("ignore-delay"), Catch: []string{"LockDelayAfterWatch"},
		Why: "took the key within its lock-delay",
	}
	ms["lock-delay-lifted-by-release"] = Mutant[S]{
		Set: delayMutant("release-after-end"), Catch: []string{"LockDelayAfterWatch"},
		Why: "the lost holder's Release within its lock-delay: <nil>",
	}
	ms["lock-delay-resumed"] = Mutant[S]{
		Set: delayMutant("resume-in-delay"), Catch: []string{"LockDelayAfterWatch"},
		Why: "Resume of a lease in its lock-delay: <nil>",
	}
	for name, m := range h.Mutants {
		if _, dup := ms[name]; dup {
			t.Fatalf("the store's mutant %q has the name of one of the suite's own", name)
		}
		ms[name] = m
	}
	return ms
}

// tokensSurviveDeleted is the name of the test, in the store's words.
func tokensSurviveDeleted[S Store](h Harness[S]) string {
	return "TokensSurviveDeleted" + strings.ToUpper(h.Record[:1]) + h.Record[1:]
}
