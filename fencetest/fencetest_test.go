package fencetest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
	"github.com/fencing/fence/fencetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The suite must catch broken drivers. Each broken driver below runs the
// whole suite in a child process (a failing suite fails its test), and the
// parent checks that the child failed, in the checks that should notice.
var broken = map[string]struct {
	wrap      func(*fencemem.Store) fence.Driver
	mustCatch []string // suite checks that must fail
}{
	"release-deletes-unconditionally": {
		wrap:      func(s *fencemem.Store) fence.Driver { return &releaseAnyway{Store: s} },
		mustCatch: []string{"LocalValidity"},
	},
	"token-resets-after-release": {
		wrap:      func(s *fencemem.Store) fence.Driver { return &tokenReset{Store: s, next: map[string]int64{}} },
		mustCatch: []string{"Tokens"},
	},
	"extend-ignores-owner": {
		wrap:      func(s *fencemem.Store) fence.Driver { return &extendAnyone{Store: s} },
		mustCatch: []string{"ForcedLoss"},
	},
}

const envBroken = "FENCETEST_SELFTEST_BROKEN"

func TestSuiteCatchesBrokenDrivers(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the suite three times")
	}
	for name, b := range broken {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestBrokenDriver$", "-test.v", "-test.count=1")
			cmd.Env = append(os.Environ(), envBroken+"="+name)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the suite passed the broken driver %q; output:\n%s", name, out)
			}
			for _, check := range b.mustCatch {
				if !strings.Contains(string(out), "--- FAIL: TestBrokenDriver/"+check+" ") {
					t.Errorf("check %s did not fail for the broken driver %q; output:\n%s", check, name, out)
				}
			}
		})
	}
}

// TestBrokenDriver runs the suite against the broken driver named in the
// environment; it runs only as a child of TestSuiteCatchesBrokenDrivers.
func TestBrokenDriver(t *testing.T) {
	name := os.Getenv(envBroken)
	if name == "" {
		t.Skip("runs only as a child of TestSuiteCatchesBrokenDrivers")
	}
	store := fencemem.New()
	drv := broken[name].wrap(store)
	fencetest.Run(t, fencetest.Config{
		SingleProcess: true,
		TTL:           300 * time.Millisecond,
		Setup: func(t *testing.T) fencetest.Store {
			return fencetest.Store{Delete: func(_ context.Context, key string) error {
				store.Delete(key)
				return nil
			}}
		},
		Open: func(string) (fence.Driver, func() error, error) { return drv, nil, nil },
	})
}

// releaseAnyway deletes the key on release whoever holds it.
type releaseAnyway struct{ *fencemem.Store }

func (d *releaseAnyway) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	c, err := d.Store.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return &releaseAnywayClaim{Claim: c, s: d.Store, key: req.Key}, nil
}

type releaseAnywayClaim struct {
	fence.Claim
	s   *fencemem.Store
	key string
}

func (c *releaseAnywayClaim) Release(context.Context) error {
	c.s.Delete(c.key)
	return nil
}

// tokenReset numbers acquisitions from 1 again after every release.
type tokenReset struct {
	*fencemem.Store
	mu   sync.Mutex
	next map[string]int64
}

func (d *tokenReset) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	c, err := d.Store.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.next[req.Key]++
	return &tokenResetClaim{Claim: c, d: d, key: req.Key, token: d.next[req.Key]}, nil
}

type tokenResetClaim struct {
	fence.Claim
	d     *tokenReset
	key   string
	token int64
}

func (c *tokenResetClaim) Token() int64 { return c.token }

func (c *tokenResetClaim) Release(ctx context.Context) error {
	c.d.mu.Lock()
	c.d.next[c.key] = 0
	c.d.mu.Unlock()
	return c.Claim.Release(ctx)
}

// extendAnyone extends the key's lease whoever holds it.
type extendAnyone struct{ *fencemem.Store }

func (d *extendAnyone) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	c, err := d.Store.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return &extendAnyoneClaim{Claim: c, s: d.Store, key: req.Key}, nil
}

type extendAnyoneClaim struct {
	fence.Claim
	s   *fencemem.Store
	key string
}

func (c *extendAnyoneClaim) Extend(ctx context.Context, ttl time.Duration) error {
	if _, err := c.s.Inspect(ctx, c.key); err != nil {
		return fmt.Errorf("%w: free", fence.ErrNotHeld)
	}
	return nil
}
