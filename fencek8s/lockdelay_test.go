package fencek8s_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencek8s"
	"github.com/fencing/fence/internal/testkit/recordtest"
)

const envDelayMutant = "FENCEK8S_DELAY_MUTANT"

// TestLockDelayAfterWatch: a contender that has watched a Lease for its
// whole duration still waits out its holder's lock-delay; the lost holder
// cannot lift it, renew or resume (recordtest.LockDelayAfterWatch). With
// FENCEK8S_DELAY_MUTANT set, the Stores keep the delay the broken way it
// names (TestLockDelayMutants).
func TestLockDelayAfterWatch(t *testing.T) {
	if m := os.Getenv(envDelayMutant); m != "" {
		t.Cleanup(fencek8s.SetDelayMutant(m))
	}
	s := startKube(t)
	a := fencek8s.New(mustClientset(t, s), namespace)
	b := fencek8s.New(mustClientset(t, s), namespace)
	recordtest.LockDelayAfterWatch(t, a, b, ttl, ttl+time.Second, "Lease")
}

// TestLockDelayMutants shows that TestLockDelayAfterWatch can fail: it
// runs it in a child process with each mutant of SetDelayMutant, and
// checks that it fails for the reason meant.
func TestLockDelayMutants(t *testing.T) {
	if os.Getenv(envDelayMutant) != "" {
		t.Skip("a mutant's child process")
	}
	for mutant, why := range map[string]string{
		"ignore-delay":      "took the key within its lock-delay",
		"release-after-end": "the lost holder's Release within its lock-delay: <nil>",
		"resume-in-delay":   "Resume of a lease in its lock-delay: <nil>",
	} {
		t.Run(mutant, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLockDelayAfterWatch$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), envDelayMutant+"="+mutant)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("TestLockDelayAfterWatch passed the mutant %q; output:\n%s", mutant, out)
			}
			if !strings.Contains(string(out), why) {
				t.Errorf("the mutant %q was caught, but not for the reason meant: no %q in the output:\n%s", mutant, why, out)
			}
		})
	}
}

// TestLockDelayElector: client-go's electors know nothing of fence's
// lock-delay (docs/kubernetes.md): an elector takes a Lease whose fence
// holder stopped renewing after leaseDurationSeconds, delay or not; and
// the delay annotation it keeps, a former fence holder's, does not hold
// fence contenders back once that elector stops renewing.
func TestLockDelayElector(t *testing.T) {
	s := startKube(t)
	cs := mustClientset(t, s)
	ctx := context.Background()
	delay := 4 * ttl
	locks := fence.New(fencek8s.New(mustClientset(t, s), namespace), fence.WithTTL(ttl))
	const name = "delay-elector"

	l, err := locks.TryAcquire(ctx, name, fence.WithLockDelay(delay), fence.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	e := startElector(t, cs, name, "elector-1", false)
	started := time.Now()
	waitFor(t, "elector leads after fence's holder stopped renewing", 5*ttl, e.leading)
	if took := time.Since(started); took >= ttl+delay {
		t.Errorf("the elector led %v after it started; want it to ignore the lock-delay (%v) and lead after the lease duration", took, delay)
	}
	if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
		t.Errorf("late Release of fence's expired lease: %v; want ErrLost", err)
	}
	e.stop() // without releasing

	fresh := fence.New(fencek8s.New(mustClientset(t, s), namespace), fence.WithTTL(ttl))
	start := time.Now()
	l2, err := fresh.Acquire(ctx, name, fence.WithWait(delay+5*electorLease))
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Release(ctx)
	if took := time.Since(start); took >= delay {
		t.Errorf("fence took %v to take the Lease of an elector that stopped renewing; want the elector's lease duration, not fence's former holder's lock-delay (%v)", took, delay)
	}
}
