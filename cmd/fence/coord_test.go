package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestClosedPortAnswersPromptly: etcd and ZooKeeper on a port where
// nothing listens say "connection refused" at once, as the other network
// stores do, instead of waiting 20 s and then blaming a firewall.
func TestClosedPortAnswersPromptly(t *testing.T) {
	addr := testserver.ClosedAddr(t)
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

// TestZooKeeperTTLWithinSessionTimeout runs against a ZooKeeper whose
// maxSessionTimeout is the stock 40 s: without --ttl, fence run takes that
// as its TTL (the default 60 s is more) and says so; a --ttl above it is a
// usage error naming the range; one within it runs as given.
func TestZooKeeperTTLWithinSessionTimeout(t *testing.T) {
	srv := testserver.ZooKeeper(t, testserver.Args("maxSessionTimeout=40000"))
	store := "zk://" + srv.Addr()
	e := newEnv(t)

	r := e.run("run", "--store", store, "--key", "k", "--json", "--", "true")
	if r.code != exitOK {
		t.Fatalf("fence run without --ttl: exit %d; want 0; it said:\n%s", r.code, r.stderr)
	}
	var said bool
	for _, line := range strings.Split(strings.TrimSpace(r.stderr), "\n") {
		var ev map[string]any
		if json.Unmarshal([]byte(line), &ev) == nil && ev["event"] == "ttl" {
			said = true
			if msg, _ := ev["message"].(string); !strings.Contains(msg, "using --ttl 40s") {
				t.Errorf("ttl event %q; want it to say it uses --ttl 40s", msg)
			}
		}
	}
	if !said {
		t.Errorf("fence run took a shorter TTL than the default without saying so:\n%s", r.stderr)
	}

	r = e.run("run", "--store", store, "--key", "k", "--ttl", "60s", "--", "true")
	if r.code != exitUsage {
		t.Errorf("fence run --ttl 60s: exit %d; want %d", r.code, exitUsage)
	}
	for _, want := range []string{"at most 40s", "--ttl from 10ms to 40s"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("fence run --ttl 60s said:\n%s\nwant %q", r.stderr, want)
		}
	}

	r = e.run("run", "--store", store, "--key", "k", "--ttl", "30s", "--", "true")
	if r.code != exitOK || strings.Contains(r.stderr, "--ttl") {
		t.Errorf("fence run --ttl 30s: exit %d; want 0 and nothing said about the TTL; it said:\n%s", r.code, r.stderr)
	}
}

// TestEtcdOneEndpointRefusing: a refusing endpoint beside a working one
// is no reason to fail.
func TestEtcdOneEndpointRefusing(t *testing.T) {
	srv := testserver.Etcd(t)
	closed := testserver.ClosedAddr(t)
	e := newEnv(t)
	for _, hosts := range []string{closed + "," + srv.Addr(), srv.Addr() + "," + closed} {
		r := e.run("status", "--store", "etcd://"+hosts, "--key", "k")
		if r.code != exitFree {
			t.Errorf("fence status --store etcd://%s: exit %d; want %d (free); it said:\n%s", hosts, r.code, exitFree, r.stderr)
		}
	}
}
