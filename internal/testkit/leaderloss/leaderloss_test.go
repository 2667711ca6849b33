package leaderloss_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
	"github.com/fencing/fence/internal/testkit/leaderloss"
)

const envChild = "LEADERLOSS_SELFTEST"

// TestChecksCanFail runs the checks, each in a child process, on fencemem
// with a "leader kill" that does nothing (they must pass) and with one
// that forgets the held key, as a store whose failover loses an
// acknowledged write (they must fail, naming two holders at once), and
// with a bound on the next grant that no store meets (it must fail).
func TestChecksCanFail(t *testing.T) {
	for _, c := range []struct {
		name string
		fail string // a piece of the failure's message; "" to pass
	}{
		{"sound", ""},
		{"forgets", "while its holder (token"},
		{"slow", "after the kill, beyond"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.v")
			cmd.Env = append(os.Environ(), envChild+"="+c.name)
			out, err := cmd.CombinedOutput()
			switch {
			case c.fail == "" && err != nil:
				t.Fatalf("the checks fail a sound store: %v\n%s", err, out)
			case c.fail != "" && err == nil:
				t.Fatalf("the checks pass a store that should fail them (%s):\n%s", c.name, out)
			case c.fail != "" && !strings.Contains(string(out), c.fail):
				t.Fatalf("the checks failed, but not with %q:\n%s", c.fail, out)
			}
		})
	}
}

// TestChild is the child of TestChecksCanFail.
func TestChild(t *testing.T) {
	mode := os.Getenv(envChild)
	if mode == "" {
		t.Skip("the child of TestChecksCanFail")
	}
	store := fencemem.New()
	// The sound store's holder keeps its lease through a "kill" that does
	// nothing: a short TTL keeps the check's wait short. The broken one's
	// TTL is long, so that its holder cannot notice before the grant.
	ttl := 300 * time.Millisecond
	if mode == "forgets" {
		ttl = 5 * time.Second
	}
	var within time.Duration
	if mode == "slow" {
		within = time.Nanosecond // beyond any store
	}
	leaderloss.Run(t, leaderloss.Cluster{
		Holder:      fence.New(store, fence.WithTTL(ttl)),
		Waiter:      fence.New(store, fence.WithTTL(ttl)),
		TTL:         ttl,
		GrantWithin: within,
		KillLeader: func(t *testing.T, key string) func() {
			if mode == "forgets" {
				store.Delete(key)
			}
			return func() {}
		},
	})
}
