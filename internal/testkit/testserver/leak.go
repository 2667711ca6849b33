package testserver

import "github.com/fencing/fence/internal/testkit/leakcheck"

// IgnoreLeaks returns the leakcheck option that tests starting servers here
// need: it ignores the one goroutine this package keeps for the life of the
// test binary (spawnLoop, which forks every server from one locked thread).
//
//	func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m, testserver.IgnoreLeaks()) }
func IgnoreLeaks() leakcheck.Option {
	return leakcheck.IgnoreAnyFunction("github.com/fencing/fence/internal/testkit/testserver.spawnLoop")
}
