package fenceredis

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/fencing/fence/internal/testkit/testserver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testserver.IgnoreLeaks(),
		// After dials to a dead server fail, go-redis probes it from a
		// goroutine that notices the client's Close only after its next
		// one-second sleep.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
