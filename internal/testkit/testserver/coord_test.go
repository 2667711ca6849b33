package testserver

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// etcdPut and etcdGet use etcd's JSON gateway (/v3/kv/...), base64 keys.
func etcdPut(ctx context.Context, endpoint, key, value string) error {
	_, err := etcdPost(ctx, endpoint+"/v3/kv/put", map[string]string{
		"key":   base64.StdEncoding.EncodeToString([]byte(key)),
		"value": base64.StdEncoding.EncodeToString([]byte(value)),
	})
	return err
}

func etcdGet(ctx context.Context, endpoint, key string) (string, error) {
	var out struct {
		Kvs []struct{ Value string }
	}
	b, err := etcdPost(ctx, endpoint+"/v3/kv/range", map[string]string{
		"key": base64.StdEncoding.EncodeToString([]byte(key)),
	})
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return "", fmt.Errorf("%v: %s", err, b)
	}
	if len(out.Kvs) != 1 {
		return "", fmt.Errorf("range %q: %s", key, b)
	}
	v, err := base64.StdEncoding.DecodeString(out.Kvs[0].Value)
	return string(v), err
}

func TestEtcd(t *testing.T) {
	t.Parallel()
	e := timed(t, "etcd", func() *EtcdServer { return Etcd(t) })
	checkProcess(t, e.Process)
	t.Logf("etcd --unsafe-no-fsync supported: %v", etcdHasFlag(Require(t, "etcd"), "--unsafe-no-fsync"))
	if got := e.Endpoints(); len(got) != 1 || got[0] != "http://"+e.Addr() {
		t.Fatalf("Endpoints() = %v", got)
	}
	ctx := testContext(t)
	if err := etcdPut(ctx, e.Endpoint(), "fence/k", "v1"); err != nil {
		t.Fatal(err)
	}
	if v, err := etcdGet(ctx, e.Endpoint(), "fence/k"); err != nil || v != "v1" {
		t.Fatalf("get = %q, %v", v, err)
	}
	e.Kill()
	timed(t, "etcd restart", func() any { e.Restart(); return nil })
	if v, err := etcdGet(ctx, e.Endpoint(), "fence/k"); err != nil || v != "v1" {
		t.Fatalf("get after Restart = %q, %v; etcd must keep its data", v, err)
	}
}

func TestEtcdCluster(t *testing.T) {
	t.Parallel()
	c := timed(t, "etcd cluster of 3", func() *EtcdClusterServer { return EtcdCluster(t, 3) })
	if len(c.Members) != 3 || len(c.Endpoints()) != 3 {
		t.Fatalf("members %d, endpoints %v", len(c.Members), c.Endpoints())
	}
	ctx := testContext(t)
	for _, m := range c.Members {
		checkProcess(t, m.Process)
	}
	if err := etcdPut(ctx, c.Members[0].Endpoint(), "fence/k", "v1"); err != nil {
		t.Fatal(err)
	}
	if v, err := etcdGet(ctx, c.Members[2].Endpoint(), "fence/k"); err != nil || v != "v1" {
		t.Fatalf("get from another member = %q, %v: not one cluster", v, err)
	}
	// One member down: the other two still have a quorum. If it was the
	// leader, a put forwarded to it before the new election is lost and
	// times out (etcd does not retry it; clients do), so retry.
	c.Members[1].Kill()
	eventually(t, 30*time.Second, "put with one member killed", func() error {
		return etcdPut(ctx, c.Members[0].Endpoint(), "fence/k", "v2")
	})
	timed(t, "etcd member restart", func() any { c.Members[1].Restart(); return nil })
	eventually(t, 30*time.Second, "get from the restarted member", func() error {
		v, err := etcdGet(ctx, c.Members[1].Endpoint(), "fence/k")
		if err == nil && v != "v2" {
			err = fmt.Errorf("got %q, want v2", v)
		}
		return err
	})
}

// eventually retries f until it succeeds, failing the test after d.
func eventually(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %v: %v", what, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestZooKeeper(t *testing.T) {
	t.Parallel()
	zk := timed(t, "zookeeper", func() *ZooKeeperServer { return ZooKeeper(t) })
	checkProcess(t, zk.Process)
	ctx := testContext(t)
	if out, err := zkFourLetter(ctx, zk.Addr(), "ruok"); err != nil || out != "imok" {
		t.Fatalf("ruok = %q, %v", out, err)
	}
	out, err := zkFourLetter(ctx, zk.Addr(), "conf")
	if err != nil || !strings.Contains(out, "tickTime=200") || !strings.Contains(out, "maxSessionTimeout=60000") {
		t.Fatalf("conf = %q, %v; want our zoo.cfg", out, err)
	}

	zk.Stop()
	checkStopped(t, zk.Process)
	sctx, cancel := short()
	if out, err := zkFourLetter(sctx, zk.Addr(), "ruok"); err == nil {
		t.Fatalf("ruok answered %q while stopped", out)
	}
	cancel()
	zk.Cont()
	if out, err := zkFourLetter(ctx, zk.Addr(), "ruok"); err != nil || out != "imok" {
		t.Fatalf("ruok after Cont = %q, %v", out, err)
	}

	zk.Kill()
	if _, err := zkFourLetter(ctx, zk.Addr(), "ruok"); err == nil {
		t.Fatal("ruok answered after Kill")
	}
	timed(t, "zookeeper restart", func() any { zk.Restart(); return nil })
	if out, err := zkFourLetter(ctx, zk.Addr(), "srvr"); err != nil || !strings.Contains(out, "Mode: standalone") {
		t.Fatalf("srvr after Restart = %q, %v", out, err)
	}
}

func TestNATS(t *testing.T) {
	t.Parallel()
	n := timed(t, "nats-server", func() *NATSServer { return NATS(t) })
	checkProcess(t, n.Process)
	t.Logf("nats-server %s at %s", n.Version(), n.URL())
	if !n.AtLeast("2.11") {
		Unavailable(t, "nats-server %s is older than 2.11 (per-key TTL); install %s", n.Version(), installHint["nats-server"])
	}
	ctx := testContext(t)
	if err := natsPing(ctx, n.Addr()); err != nil {
		t.Fatal(err)
	}
	n.Kill()
	if err := natsPing(ctx, n.Addr()); err == nil {
		t.Fatal("nats-server answered after Kill")
	}
	timed(t, "nats-server restart", func() any { n.Restart(); return nil })
	if err := natsPing(ctx, n.Addr()); err != nil {
		t.Fatal(err)
	}
}

func TestAzurite(t *testing.T) {
	t.Parallel()
	az := timed(t, "azurite-blob", func() *AzuriteServer { return Azurite(t) })
	checkProcess(t, az.Process)
	if want := "http://" + az.Addr() + "/devstoreaccount1"; az.BlobURL() != want {
		t.Errorf("BlobURL() = %q, want %q", az.BlobURL(), want)
	}
	if !strings.Contains(az.ConnectionString(), "BlobEndpoint="+az.BlobURL()) {
		t.Errorf("ConnectionString() = %q", az.ConnectionString())
	}
	ctx := testContext(t)
	// The development key must work: create a container, write and read a blob.
	azDo(t, ctx, http.MethodPut, az.BlobURL()+"/fence?restype=container", nil, nil, http.StatusCreated)
	azDo(t, ctx, http.MethodPut, az.BlobURL()+"/fence/k", map[string]string{"x-ms-blob-type": "BlockBlob"},
		[]byte("v1"), http.StatusCreated)
	if got := azDo(t, ctx, http.MethodGet, az.BlobURL()+"/fence/k", nil, nil, http.StatusOK); got != "v1" {
		t.Fatalf("GET blob = %q, want v1", got)
	}
	// A wrong key is refused, so the check above means something.
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, az.BlobURL()+"/fence/k", nil)
	req.Header.Set("x-ms-version", "2021-08-06")
	req.Header.Set("x-ms-date", time.Now().UTC().Format(http.TimeFormat))
	req.Header.Set("Authorization", "SharedKey "+AzuriteAccount+":"+base64.StdEncoding.EncodeToString(make([]byte, 32)))
	if resp, err := noKeepAlive.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("bad signature: %v, %v; want 403", resp, err)
	} else {
		resp.Body.Close()
	}

	az.Kill()
	timed(t, "azurite-blob restart", func() any { az.Restart(); return nil })
	azDo(t, ctx, http.MethodGet, az.BlobURL()+"?comp=list", nil, nil, http.StatusOK)
}

// azDo sends a request signed with the development account's Shared Key and
// returns the body, failing unless the status is want.
func azDo(t *testing.T, ctx context.Context, method, rawURL string, headers map[string]string, body []byte, want int) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, rawURL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("x-ms-version", "2021-08-06")
	req.Header.Set("x-ms-date", time.Now().UTC().Format(http.TimeFormat))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.ContentLength = int64(len(body))
	signSharedKey(req, AzuriteAccount, AzuriteKey)
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %s, want %d: %s", method, rawURL, resp.Status, want, b)
	}
	return string(b)
}

// signSharedKey adds the Authorization header of Azure Storage's Shared Key
// scheme (blob service, version 2015-02-21 and later).
func signSharedKey(req *http.Request, account, key string) {
	length := ""
	if req.ContentLength > 0 {
		length = fmt.Sprint(req.ContentLength)
	}
	h := req.Header
	var ms []string
	for k := range h {
		if lk := strings.ToLower(k); strings.HasPrefix(lk, "x-ms-") {
			ms = append(ms, lk+":"+strings.TrimSpace(h.Get(k)))
		}
	}
	sort.Strings(ms)
	resource := "/" + account + req.URL.EscapedPath()
	q := req.URL.Query()
	var names []string
	for k := range q {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		vals := q[k]
		sort.Strings(vals)
		resource += "\n" + strings.ToLower(k) + ":" + strings.Join(vals, ",")
	}
	toSign := strings.Join([]string{
		req.Method,
		h.Get("Content-Encoding"), h.Get("Content-Language"), length,
		h.Get("Content-MD5"), h.Get("Content-Type"), "", // Date: x-ms-date is used
		h.Get("If-Modified-Since"), h.Get("If-Match"), h.Get("If-None-Match"),
		h.Get("If-Unmodified-Since"), h.Get("Range"),
	}, "\n") + "\n" + strings.Join(ms, "\n") + "\n" + resource
	k, _ := base64.StdEncoding.DecodeString(key)
	mac := hmac.New(sha256.New, k)
	mac.Write([]byte(toSign))
	h.Set("Authorization", "SharedKey "+account+":"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
}

// TestEtcdClusterReplaceEmpty: a member brought back empty by
// reconfiguration has a new ID, serves the data the others kept, and the
// cluster takes writes again with all three.
func TestEtcdClusterReplaceEmpty(t *testing.T) {
	t.Parallel()
	c := timed(t, "etcd cluster of 3", func() *EtcdClusterServer { return EtcdCluster(t, 3) })
	ctx := testContext(t)
	if err := etcdPut(ctx, c.Members[0].Endpoint(), "fence/k", "v1"); err != nil {
		t.Fatal(err)
	}
	before, err := etcdMemberID(ctx, c.Members[0].Endpoint(), c.Members[2].Name())
	if err != nil || before == "" {
		t.Fatalf("member ID of %s: %q, %v", c.Members[2].Name(), before, err)
	}
	timed(t, "ReplaceEmpty", func() any {
		if err := c.ReplaceEmpty(2); err != nil {
			t.Fatal(err)
		}
		return nil
	})
	after, err := etcdMemberID(ctx, c.Members[0].Endpoint(), c.Members[2].Name())
	if err != nil || after == "" || after == before {
		t.Fatalf("member ID after ReplaceEmpty: %q (before %q), %v; want a new member", after, before, err)
	}
	if v, err := etcdGet(ctx, c.Members[2].Endpoint(), "fence/k"); err != nil || v != "v1" {
		t.Fatalf("get from the replaced member = %q, %v; want the others' data", v, err)
	}
	eventually(t, 30*time.Second, "put through the replaced member", func() error {
		return etcdPut(ctx, c.Members[2].Endpoint(), "fence/k", "v2")
	})
}

// TestZooKeeperEnsembleReplaceEmpty: a server brought back without its
// transaction log keeps its myid and takes the ensemble's state from the
// leader: its zxid is the leader's, not the zero of an empty log.
func TestZooKeeperEnsembleReplaceEmpty(t *testing.T) {
	t.Parallel()
	e := timed(t, "ZooKeeper ensemble of 3", func() *ZooKeeperEnsembleServer { return ZooKeeperEnsemble(t, 3) })
	ctx := testContext(t)
	timed(t, "ReplaceEmpty", func() any {
		if err := e.ReplaceEmpty(1); err != nil {
			t.Fatal(err)
		}
		return nil
	})
	if _, err := os.Stat(filepath.Join(e.Servers[1].dir, "data", "myid")); err != nil {
		t.Fatalf("myid after ReplaceEmpty: %v", err)
	}
	zxid := func(s *ZooKeeperServer) string {
		out, err := zkFourLetter(ctx, s.Addr(), "srvr")
		if err != nil {
			t.Fatalf("srvr of %s: %v", s.Addr(), err)
		}
		for _, line := range strings.Split(out, "\n") {
			if v, ok := strings.CutPrefix(line, "Zxid: "); ok {
				return strings.TrimSpace(v)
			}
		}
		t.Fatalf("srvr of %s has no Zxid: %s", s.Addr(), out)
		return ""
	}
	eventually(t, 30*time.Second, "the replaced server in sync", func() error {
		leader := e.Leader(ctx)
		if leader == nil || leader == e.Servers[1] {
			return fmt.Errorf("leader %v: want one of the two others", leader)
		}
		got, want := zxid(e.Servers[1]), zxid(leader)
		if got == "0x0" || got != want {
			return fmt.Errorf("zxid %s, the leader has %s", got, want)
		}
		return nil
	})
}
