package main

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testserver"
)

// closedAddr returns a loopback address where nothing listens: a port
// that was free a moment ago.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestClosedPortAnswersPromptly: etcd and ZooKeeper on a port where
// nothing listens say "connection refused" at once, as the other network
// stores do, instead of waiting 20 s and then blaming a firewall.
func TestClosedPortAnswersPromptly(t *testing.T) {
	addr := closedAddr(t)
	e := newEnv(t)
	for _, url := range []string{"etcd://" + addr, "etcd://u:secret@" + addr, "zk://" + addr} {
		t.Run(strings.SplitN(url, ":", 2)[0], func(t *testing.T) {
			r := e.run("status", "--store", url, "--key", "k")
			if r.code != exitError {
				t.Errorf("fence status --store %s: exit %d; want %d", url, r.code, exitError)
			}
			for _, want := range []string{"connection refused", "nothing accepts connections at " + addr} {
				if !strings.Contains(r.stderr, want) {
					t.Errorf("fence status --store %s said:\n%s\nwant %q", url, r.stderr, want)
				}
			}
			if strings.Contains(r.stderr, "secret") {
				t.Errorf("fence status printed the password:\n%s", r.stderr)
			}
			if r.took > 5*time.Second {
				t.Errorf("fence status --store %s took %v; want at once", url, r.took)
			}
		})
	}
}

// TestEtcdOneEndpointRefusing: a refusing endpoint beside a working one
// is no reason to fail.
func TestEtcdOneEndpointRefusing(t *testing.T) {
	srv := testserver.Etcd(t)
	closed := closedAddr(t)
	e := newEnv(t)
	for _, hosts := range []string{closed + "," + srv.Addr(), srv.Addr() + "," + closed} {
		r := e.run("status", "--store", "etcd://"+hosts, "--key", "k")
		if r.code != exitFree {
			t.Errorf("fence status --store etcd://%s: exit %d; want %d (free); it said:\n%s", hosts, r.code, exitFree, r.stderr)
		}
	}
}
