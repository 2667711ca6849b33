package leakcheck

import (
	"strings"
	"testing"
	"time"
)

func TestMain(m *testing.M) { VerifyTestMain(m) }

func parked(stop <-chan struct{}) { <-stop }

// TestFindsALeak: a goroutine left blocked is reported, by name, until it
// ends; options ignore it.
func TestFindsALeak(t *testing.T) {
	defer func(s time.Duration) { Settle = s }(Settle)
	Settle = 50 * time.Millisecond
	before := IgnoreCurrent()
	stop := make(chan struct{})
	go parked(stop)
	err := Find(before)
	if err == nil || !strings.Contains(err.Error(), "leakcheck.parked") {
		t.Fatalf("Find with a parked goroutine = %v, want it named", err)
	}
	if err := Find(before, IgnoreAnyFunction("github.com/fencing/fence/internal/testkit/leakcheck.parked")); err != nil {
		t.Errorf("IgnoreAnyFunction did not ignore it: %v", err)
	}
	close(stop)
	Settle = 5 * time.Second
	if err := Find(before); err != nil {
		t.Errorf("after the goroutine ended: %v", err)
	}
}

// TestWaitsForEndingGoroutines: a goroutine that ends shortly after the
// check starts is not a leak.
func TestWaitsForEndingGoroutines(t *testing.T) {
	before := IgnoreCurrent()
	stop := make(chan struct{})
	go parked(stop)
	time.AfterFunc(20*time.Millisecond, func() { close(stop) })
	if err := Find(before); err != nil {
		t.Errorf("a goroutine ending within Settle was reported: %v", err)
	}
}

// TestIgnoresTheCallerAndTesting: with nothing started, nothing is found,
// although the testing package runs goroutines of its own.
func TestIgnoresTheCallerAndTesting(t *testing.T) {
	t.Run("sub", func(t *testing.T) {
		if err := Find(); err != nil {
			t.Errorf("nothing started, yet: %v", err)
		}
	})
}
