package fenceredis

import (
	"testing"

	"github.com/fencing/fence/internal/testkit/leakcheck"

	"github.com/fencing/fence/internal/testkit/testserver"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m, testserver.IgnoreLeaks(),
		// After dials to a dead server fail, go-redis probes it from a
		// goroutine that notices the client's Close only after its next
		// one-second sleep.
		leakcheck.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
