package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/fencing/fence/fenceaztable"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestAztableStore runs fence against a private Azurite Table service
// through an aztable+http:// store URL carrying the account key.
func TestAztableStore(t *testing.T) {
	az := testserver.AzuriteTable(t)
	escapedKey := url.QueryEscape(testserver.AzuriteKey)
	const name = "fencecli"
	e := &env{t: t, home: t.TempDir(),
		store: "aztable+http://" + testserver.AzuriteAccount + ":" + escapedKey + "@" + az.Addr() + "/" + testserver.AzuriteAccount + "/" + name}
	noKey := func(r result) {
		t.Helper()
		for _, s := range []string{testserver.AzuriteKey, escapedKey, testserver.AzuriteKey[:20]} {
			if strings.Contains(r.stdout+r.stderr, s) {
				t.Errorf("fence printed the account key:\n%s%s", r.stdout, r.stderr)
			}
		}
	}

	var last int64
	for range 2 {
		r := e.run("run", "--ttl", "3s", "--key", "jobs/nightly", "--", "sh", "-c", "echo $FENCE_TOKEN")
		noKey(r)
		if tok := tokenOf(t, r); tok <= last {
			t.Fatalf("token %d after %d", tok, last)
		} else {
			last = tok
		}
	}

	// Held: a second run is skipped, naming the holder; status and list
	// tell the holder, and the lease's TTL as the time left (a fresh
	// process has watched it for no time yet).
	h, started := e.start("run", "--json", "--ttl", "3s", "--key", "k", "--", "sleep", "60")
	r := e.run("run", "--no-wait", "--key", "k", "--", "true")
	noKey(r)
	if r.code != 75 || !strings.Contains(r.stderr, "pid "+strconv.Itoa(h.cmd.Process.Pid)) ||
		!strings.Contains(r.stderr, fmt.Sprintf("token %d", num(started["token"]))) {
		t.Errorf("run on a held key: exit %d, want 75 naming the holder; stderr:\n%s", r.code, r.stderr)
	}
	r = e.run("status", "--key", "k", "--json")
	noKey(r)
	var st holderJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 || !st.Held ||
		st.Token != num(started["token"]) || st.ExpiresInMS != 3000 {
		t.Errorf("status: exit %d, %q", r.code, r.stdout)
	}
	if r := e.run("list", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"k"`) || strings.Contains(r.stdout, "jobs/nightly") {
		t.Errorf("list: exit %d, %q; want k only", r.code, r.stdout)
	}

	// An operator frees the key behind the holder's back: CMD is
	// stopped, fence exits 76.
	svc, err := aztables.NewServiceClientFromConnectionString(az.ConnectionString(), fenceaztable.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := fenceaztable.New(svc.NewClient(name)).Break(ctx, "k", 0); err != nil {
		t.Fatal(err)
	}
	if ev := h.expect(t, "lost"); ev["reason"] != "refused" {
		t.Errorf("lost event = %v", ev)
	}
	if code := h.wait(t); code != 76 {
		t.Errorf("fence exited %d after its lease was broken, want 76; it said:\n%s", code, h.stderr)
	}
	if r := e.run("status", "--key", "k", "--json"); r.code != exitFree || !strings.Contains(r.stdout, `"held":false`) {
		t.Errorf("status of a freed key: exit %d, %q", r.code, r.stdout)
	}

	// An unreachable store: an error, without the key.
	e.store = strings.Replace(e.store, az.Addr(), "127.0.0.1:1", 1)
	r = e.run("run", "--no-wait", "--key", "k", "--", "true")
	noKey(r)
	if r.code != 1 || !strings.Contains(r.stderr, "connection refused") {
		t.Errorf("run on an unreachable store: exit %d; stderr:\n%s", r.code, r.stderr)
	}
}
