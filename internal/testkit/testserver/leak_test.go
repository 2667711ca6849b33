package testserver

import (
	"testing"

	"github.com/fencing/fence/internal/testkit/leakcheck"
)

// TestIgnoreLeaks: once a server has started and been killed, the only
// goroutine this package leaves is the one IgnoreLeaks ignores.
func TestIgnoreLeaks(t *testing.T) {
	before := leakcheck.IgnoreCurrent()
	srv := Etcd(t)
	srv.Kill()
	if err := leakcheck.Find(before, IgnoreLeaks()); err != nil {
		t.Errorf("goroutines left besides the spawner: %v", err)
	}
	if err := leakcheck.Find(before); err == nil {
		t.Logf("the spawner was started before this test; nothing to check")
	}
}
