package testserver

import "go.uber.org/goleak"

// GoleakOptions returns the goleak options a test package that starts
// servers needs in its TestMain: the goroutine that forks every server
// (forkLoop) lives as long as the test binary, by design.
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testserver.GoleakOptions()...) }
func GoleakOptions() []goleak.Option {
	return []goleak.Option{goleak.IgnoreAnyFunction("github.com/fencing/fence/internal/testserver.forkLoop")}
}
