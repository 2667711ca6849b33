package fencezk_test

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/fencing/fence/fencezk"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestDialRefusedIsPrompt: Dial to a port where nothing listens says
// "connection refused" at once, instead of waiting out the session
// timeout for a session that cannot come.
func TestDialRefusedIsPrompt(t *testing.T) {
	addr := testserver.ClosedAddr(t)
	start := time.Now()
	d, err := fencezk.Dial([]string{addr}, 30*time.Second)
	took := time.Since(start)
	if err == nil {
		d.Close()
		t.Fatalf("Dial(%s) with nothing listening succeeded", addr)
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Dial(%s): %v; want an error matching ECONNREFUSED", addr, err)
	}
	if took > 5*time.Second {
		t.Errorf("Dial(%s) took %v to fail; want at once", addr, took)
	}
	t.Logf("Dial failed after %v: %v", took, err)
}

// TestDialWaitsForSilentServer: a server that accepts connections but
// never answers (a hung server, a blackholing middlebox) is not a refusal:
// Dial waits for it, bounded by the session timeout as before.
func TestDialWaitsForSilentServer(t *testing.T) {
	addr := testserver.SilentAddr(t)
	const timeout = 2 * time.Second
	start := time.Now()
	d, err := fencezk.Dial([]string{addr}, timeout)
	took := time.Since(start)
	if err == nil {
		d.Close()
		t.Fatal("Dial to a silent server succeeded")
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("Dial to a silent server: %v; not a refusal", err)
	}
	if took < timeout || took > timeout+10*time.Second {
		t.Errorf("Dial to a silent server gave up after %v; want about the session timeout %v", took, timeout)
	}
}

// TestDialRefusedBySomeServers: refusing servers among the ensemble's are
// no reason to fail while one has not answered yet; Dial connects to the
// one that works. (go-zookeeper tries the servers in random order: the
// working one comes last 1 time in 4.)
func TestDialRefusedBySomeServers(t *testing.T) {
	srv := testserver.ZooKeeper(t)
	d, err := fencezk.Dial([]string{testserver.ClosedAddr(t), testserver.ClosedAddr(t), testserver.ClosedAddr(t), srv.Addr()}, sessionTimeout)
	if err != nil {
		t.Fatalf("Dial with three of four servers refusing: %v", err)
	}
	d.Close()
}
