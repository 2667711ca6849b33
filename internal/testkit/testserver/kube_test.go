package testserver

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// kubeDo sends one request with the server's token over TLS that trusts
// only CAFile, and returns the status and body.
func kubeDo(t *testing.T, ctx context.Context, k *KubeServer, token, method, path, body string) (int, string) {
	t.Helper()
	pem, err := os.ReadFile(k.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("CAFile %s holds no certificate", k.CAFile())
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, DisableKeepAlives: true}}
	req, err := http.NewRequestWithContext(ctx, method, k.Host()+path, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestKube(t *testing.T) {
	t.Parallel()
	k := timed(t, "kube-apiserver", func() *KubeServer { return Kube(t) })
	checkProcess(t, k.Process)
	checkProcess(t, k.Etcd.Process)
	ctx := testContext(t)
	const leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
	lease := `{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"t"},"spec":{"holderIdentity":"me"}}`
	if code, body := kubeDo(t, ctx, k, k.Token(), http.MethodPost, leases, lease); code != http.StatusCreated {
		t.Fatalf("create Lease: %d %s", code, body)
	}
	if code, _ := kubeDo(t, ctx, k, "wrong-token", http.MethodGet, leases+"/t", ""); code != http.StatusUnauthorized {
		t.Errorf("GET with a wrong token: %d; want 401", code)
	}
	if cfg, err := os.ReadFile(k.Kubeconfig()); err != nil || !strings.Contains(string(cfg), k.Host()) {
		t.Errorf("Kubeconfig: %v\n%s", err, cfg)
	}
	// The API server keeps nothing: its etcd does, across its restart.
	k.Kill()
	timed(t, "kube-apiserver restart", func() any { k.Restart(); return nil })
	if code, body := kubeDo(t, ctx, k, k.Token(), http.MethodGet, leases+"/t", ""); code != http.StatusOK || !strings.Contains(body, `"holderIdentity":"me"`) {
		t.Fatalf("GET Lease after restart: %d %s", code, body)
	}
}
