package fenceredis

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/fencing/fence/internal/testserver"
)

func TestMain(m *testing.M) {
	if os.Getenv("FENCETEST_WORKER") != "" {
		// A contender process of the conformance suite: the suite's
		// goroutine reading its standard input lives until the process
		// ends, so goleak would fail every worker.
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m, testserver.IgnoreLeaks(),
		// After dials to a dead server fail, go-redis probes it from a
		// goroutine that notices the client's Close only after its next
		// one-second sleep.
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}
