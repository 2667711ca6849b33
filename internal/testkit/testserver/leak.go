package testserver

import "go.uber.org/goleak"

// IgnoreLeaks returns the goleak option that tests starting servers here
// need: it ignores the one goroutine this package keeps for the life of the
// test binary (spawnLoop, which forks every server from one locked thread).
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testserver.IgnoreLeaks()) }
func IgnoreLeaks() goleak.Option {
	return goleak.IgnoreAnyFunction("github.com/fencing/fence/internal/testkit/testserver.spawnLoop")
}
