package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/fencing/fence/fenceazblob"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestAzblobStore runs fence against a private Azurite through an
// azblob+http:// store URL carrying the account key.
func TestAzblobStore(t *testing.T) {
	az := testserver.Azurite(t)
	escapedKey := url.QueryEscape(testserver.AzuriteKey)
	const name = "fence-cli"
	e := &env{t: t, home: t.TempDir(),
		store: "azblob+http://" + testserver.AzuriteAccount + ":" + escapedKey + "@" + az.Addr() + "/" + testserver.AzuriteAccount + "/" + name}
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
		r := e.run("run", "--ttl", "15s", "--key", "jobs/nightly", "--", "sh", "-c", "echo $FENCE_TOKEN")
		noKey(r)
		if tok := tokenOf(t, r); tok <= last {
			t.Fatalf("token %d after %d", tok, last)
		} else {
			last = tok
		}
	}

	// Held: a second run is skipped, naming the holder; status tells the
	// holder and the lease duration (the store does not tell the time
	// left).
	h, started := e.start("run", "--json", "--ttl", "15s", "--key", "k", "--", "sleep", "60")
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
		st.Token != num(started["token"]) || st.ExpiresInMS != 15000 {
		t.Errorf("status: exit %d, %q", r.code, r.stdout)
	}
	if r := e.run("list", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"k"`) {
		t.Errorf("list: exit %d, %q", r.code, r.stdout)
	}

	// An operator breaks the lease: CMD is stopped, fence exits 76.
	c, err := container.NewClientFromConnectionString(az.ConnectionString(), name, fenceazblob.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := fenceazblob.New(c).Break(ctx, "k", 0); err != nil {
		t.Fatal(err)
	}
	if ev := h.expect(t, "lost"); ev["reason"] != "refused" {
		t.Errorf("lost event = %v", ev)
	}
	if code := h.wait(t); code != 76 {
		t.Errorf("fence exited %d after its lease was broken, want 76; it said:\n%s", code, h.stderr)
	}

	// A TTL outside Azure's range is a usage error that names the range.
	r = e.run("run", "--ttl", "5s", "--key", "k", "--", "true")
	noKey(r)
	if r.code != 2 || !strings.Contains(r.stderr, "15s to 1m0s") {
		t.Errorf("run --ttl 5s: exit %d, want 2 naming the range; stderr:\n%s", r.code, r.stderr)
	}

	// Credentials the service refuses: a wrong key, a SAS token with a
	// wrong signature. The error says so, without them, in text and JSON.
	wrongKey := base64.StdEncoding.EncodeToString([]byte("a wrong key of the right length for Azure Storage, 64 bytes long"))
	wrongSig := base64.StdEncoding.EncodeToString([]byte("a wrong signature, 32 bytes long"))
	for _, c := range []credCase{
		{[]string{"status", "--store", "azblob+http://" + testserver.AzuriteAccount + ":" + url.QueryEscape(wrongKey) + "@" + az.Addr() + "/" +
			testserver.AzuriteAccount + "/" + name, "--key", "k"}, 1, []string{wrongKey, url.QueryEscape(wrongKey), wrongKey[:20]}, []string{"403", az.Addr()}},
		{[]string{"status", "--store", "azblob+http://" + az.Addr() + "/" + testserver.AzuriteAccount + "/" + name +
			"?sv=2024-08-04&sr=c&sp=rwc&se=2030-01-01T00%3A00%3A00Z&sig=" + url.QueryEscape(wrongSig), "--key", "k"},
			1, []string{wrongSig, url.QueryEscape(wrongSig), wrongSig[:20]}, []string{"403", "sv=2024-08-04&sr=c&sp=rwc&se=2030-01-01T00%3A00%3A00Z&sig=xxxxx"}},
	} {
		c.check(t, e)
	}

	// An unreachable store: an error, without the key.
	e.store = strings.Replace(e.store, az.Addr(), "127.0.0.1:1", 1)
	r = e.run("run", "--no-wait", "--key", "k", "--", "true")
	noKey(r)
	if r.code != 1 || !strings.Contains(r.stderr, "connection refused") {
		t.Errorf("run on an unreachable store: exit %d; stderr:\n%s", r.code, r.stderr)
	}
}
