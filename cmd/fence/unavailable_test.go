package main

import (
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence/internal/testkit/faultproxy"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestRunWaitsThroughUnavailableStore: a store that answers that it
// cannot grant for now (here a Redis made a replica, as a failover
// leaves a demoted master: READONLY) does not end a waiting run. fence
// says it waits and why, and runs CMD once the store grants, for --key
// and --keys. With --no-wait, or when the wait runs out while the store
// is still unavailable, it exits 1, not 75: no holder was ever seen.
func TestRunWaitsThroughUnavailableStore(t *testing.T) {
	t.Parallel()
	srv := testserver.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	host, port, _ := net.SplitHostPort(testserver.ClosedAddr(t))
	replicaOf := func(args ...any) {
		t.Helper()
		if err := rdb.Do(t.Context(), append([]any{"REPLICAOF"}, args...)...).Err(); err != nil {
			t.Fatal(err)
		}
	}
	replicaOf(host, port)
	store := "redis://" + srv.Addr()
	e := newEnv(t)

	r := e.run("run", "--store", store, "--no-wait", "--key", "k", "--", "true")
	if r.code != exitError || !strings.Contains(r.stderr, "READONLY") || r.took > 10*time.Second {
		t.Errorf("--no-wait on a store unavailable for now: exit %d after %v; want %d at once, saying READONLY; stderr:\n%s",
			r.code, r.took.Round(time.Millisecond), exitError, r.stderr)
	}
	r = e.run("run", "--store", store, "--wait", "2s", "--key", "k", "--", "true")
	if r.code != exitError || !strings.Contains(r.stderr, "READONLY") || r.took < 2*time.Second {
		t.Errorf("--wait 2s on a store unavailable throughout: exit %d after %v; want %d after the 2s, saying READONLY; stderr:\n%s",
			r.code, r.took.Round(time.Millisecond), exitError, r.stderr)
	}

	marker := t.TempDir() + "/ran"
	for _, keys := range [][]string{{"--key", "k"}, {"--keys", "a,b"}} {
		args := append([]string{"run", "--json", "--store", store, "--wait", "40s"}, keys...)
		h := e.background(append(args, "--", "touch", marker)...)
		ev := h.expect(t, "waiting")
		if msg, _ := ev["message"].(string); !strings.Contains(msg, "the store is unavailable") || !strings.Contains(msg, "READONLY") {
			t.Errorf("fence %s: waiting event %q; want it to say the store is unavailable, and why", keys[0], msg)
		}
		time.Sleep(time.Second)
		replicaOf("NO", "ONE")
		h.expect(t, "started")
		if code := h.wait(t); code != exitOK {
			t.Errorf("fence %s: exit %d once the store could grant; want 0; it said:\n%s", keys[0], code, h.stderr)
		}
		replicaOf(host, port)
	}
}

// TestRunWaitsAfterLateGrant: a grant whose reply comes back after the
// lease's validity has ended (a store that answers slowly: here every
// byte to and from Redis held 300 ms, against a 500 ms TTL) is no lease,
// and a waiting run says so and tries again, as a waiting Acquire does,
// instead of exiting 1; once the store answers in time, CMD runs. With --no-wait it
// exits 1 at once, saying why.
func TestRunWaitsAfterLateGrant(t *testing.T) {
	t.Parallel()
	srv := testserver.Redis(t)
	px, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	store := "redis://" + px.Addr()
	e := newEnv(t)
	px.Delay(300*time.Millisecond, 0)

	r := e.run("run", "--store", store, "--ttl", "500ms", "--no-wait", "--key", "late", "--", "true")
	if r.code != exitError || !strings.Contains(r.stderr, "lost") {
		t.Errorf("--no-wait with the grant too late: exit %d after %v; want %d, saying the lease was lost; stderr:\n%s",
			r.code, r.took.Round(time.Millisecond), exitError, r.stderr)
	}

	marker := t.TempDir() + "/ran"
	h := e.background("run", "--json", "--store", store, "--ttl", "500ms", "--wait", "60s", "--key", "late2", "--", "touch", marker)
	ev := h.expect(t, "waiting")
	if msg, _ := ev["message"].(string); !strings.Contains(msg, "came back too late") {
		t.Errorf("waiting event %q; want it to say the grant came back too late", msg)
	}
	time.Sleep(2 * time.Second) // more late grants
	px.Heal()
	h.expect(t, "started")
	if code := h.wait(t); code != exitOK {
		t.Errorf("exit %d once the store answered in time; want 0; it said:\n%s", code, h.stderr)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Errorf("CMD did not run: %v", err)
	}
}
