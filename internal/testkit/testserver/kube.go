package testserver

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// KubeVersion is the kube-apiserver scripts/kube-apiserver builds into
// RepoRoot()/.tools/kube/KubeVersion; keep the two in step.
const KubeVersion = "v1.37.2"

// KubeServer is a private kube-apiserver on loopback, backed by a private
// etcd of its own (Etcd). The API server keeps nothing itself: its state,
// Leases included, is in the etcd, which survives the API server's Kill and
// Restart.
type KubeServer struct {
	*Process
	// Etcd is the API server's store; kill or pause it for store faults.
	Etcd   *EtcdServer
	token  string
	caFile string
	dir    string
}

// Host returns the API server's URL, "https://127.0.0.1:port".
func (k *KubeServer) Host() string { return "https://" + k.Addr() }

// Token returns a bearer token of a user in group system:masters. The
// server authorizes every request (AlwaysAllow) of an authenticated user.
func (k *KubeServer) Token() string { return k.token }

// CAFile returns the path of the PEM certificate the server serves with
// (self-signed): the one certificate a client must trust.
func (k *KubeServer) CAFile() string { return k.caFile }

// Kubeconfig writes a kubeconfig file for the server (one cluster, user
// and context, all named "fence-test", the current context) and returns
// its path.
func (k *KubeServer) Kubeconfig() string {
	path := filepath.Join(k.dir, "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fence-test
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: fence-test
  user:
    token: %s
contexts:
- name: fence-test
  context:
    cluster: fence-test
    user: fence-test
current-context: fence-test
`, k.Host(), k.caFile, k.token)
	// Written whole under another name, then renamed into place: callers
	// in other goroutines may be reading the file while this one writes
	// it, and a reader must never see it truncated.
	if err := writeFileAtomic(path, []byte(cfg)); err != nil {
		k.tb.Fatalf("testserver: %v", err)
	}
	return path
}

// writeFileAtomic writes data to path through a temporary file in the
// same directory and a rename, so that path always holds a whole file.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// Kube starts a private etcd and a kube-apiserver on free loopback ports and
// waits until the API server reports ready (/readyz). The binary is the one
// scripts/kube-apiserver builds (RepoRoot()/.tools/kube/KubeVersion), else
// $FENCE_KUBE_APISERVER, else kube-apiserver on PATH.
//
// The server authenticates a static bearer token (Token), authorizes
// everything, serves a self-signed certificate (CAFile) and runs no
// controllers: no namespace but the built-in ones, no service accounts.
// Its own Leases (kube-system) are there, as in any cluster.
func Kube(t testing.TB, opts ...Option) *KubeServer {
	t.Helper()
	awaitKubeBuild(t)
	bin := Require(t, "kube-apiserver")
	o := collect(opts)
	o.check(t, "Kube", credentials{})
	// Debian's etcd 3.4 sends watch progress notifications only when asked
	// to by this flag; without them the API server's watch cache falls
	// behind and a client's watch fails with "Too large resource version".
	e := Etcd(t, Args("--experimental-watch-progress-notify-interval=200ms"))
	dir := dataDir(t, "kube")
	k := &KubeServer{Etcd: e, dir: dir, caFile: filepath.Join(dir, "certs", "apiserver.crt")}
	k.token = randomHex(16)
	if err := os.WriteFile(filepath.Join(dir, "tokens.csv"), []byte(k.token+",admin,admin-uid,system:masters\n"), 0o600); err != nil {
		t.Fatalf("testserver: %v", err)
	}
	if err := writeRSAKey(filepath.Join(dir, "sa.key")); err != nil {
		t.Fatalf("testserver: service-account key: %v", err)
	}
	startRetrying(t, "kube-apiserver", func() error {
		port, err := freePort(0)
		if err != nil {
			return err
		}
		host := "https://127.0.0.1:" + strconv.Itoa(port)
		args := append([]string{
			"--etcd-servers", e.Endpoint(),
			"--bind-address", "127.0.0.1",
			"--advertise-address", "127.0.0.1",
			"--secure-port", strconv.Itoa(port),
			"--cert-dir", filepath.Join(dir, "certs"),
			"--token-auth-file", filepath.Join(dir, "tokens.csv"),
			"--authorization-mode", "AlwaysAllow",
			"--service-account-issuer", host,
			"--service-account-key-file", filepath.Join(dir, "sa.key"),
			"--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
			"--service-cluster-ip-range", "10.0.0.0/24",
			"--disable-admission-plugins", "ServiceAccount",
			// 1.37 refuses a loopback advertise address for the
			// endpoints of the default "kubernetes" service otherwise.
			"--endpoint-reconciler-type", "none",
		}, o.args...)
		k.Process = newProcess(t, procSpec{
			name: "kube-apiserver",
			path: bin,
			args: args,
			dir:  dir,
			port: port,
			ping: func(ctx context.Context) error { return kubeReady(ctx, host, k.token) },
		})
		return k.start()
	})
	return k
}

// kubeReady asks /readyz. It does not check the certificate: the server
// generates it at its first start.
func kubeReady(ctx context.Context, host, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, host+"/readyz", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := insecureNoKeepAlive.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kube-apiserver /readyz: %s", resp.Status)
	}
	return nil
}

var insecureNoKeepAlive = &http.Client{
	Transport: &http.Transport{
		DisableKeepAlives: true,
		Proxy:             nil,
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, // a readiness ping only
	},
	Timeout: 10 * time.Second,
}

func writeRSAKey(path string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	b := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	return os.WriteFile(path, b, 0o600)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// kubeCandidates lists where lookup looks for kube-apiserver.
func kubeCandidates() []string {
	var c []string
	if root := RepoRoot(); root != "" {
		c = append(c, filepath.Join(root, ".tools", "kube", KubeVersion, "kube-apiserver"))
	}
	if p := os.Getenv("FENCE_KUBE_APISERVER"); p != "" {
		c = append(c, p)
	}
	return append(c, "PATH")
}

// KubeBuildWait bounds how long Kube waits for a build of kube-apiserver
// that scripts/test started in the background.
var KubeBuildWait = 30 * time.Minute

// awaitKubeBuild waits while scripts/test builds kube-apiserver in the
// background: it runs the build beside the other tests, which need no
// API server, and marks it with RepoRoot()/.tools/kube/KubeVersion/building
// (removed when done) and build.failed (with the build's output) if it
// failed. A failed build fails the test, whatever strict mode says: the
// binary was meant to be there.
func awaitKubeBuild(t testing.TB) {
	t.Helper()
	root := RepoRoot()
	if root == "" {
		return
	}
	dir := filepath.Join(root, ".tools", "kube", KubeVersion)
	failed := func() {
		if out, err := os.ReadFile(filepath.Join(dir, "build.failed")); err == nil {
			t.Fatalf("testserver: the kube-apiserver build that scripts/test started failed:\n%s", out)
		}
	}
	failed()
	building := filepath.Join(dir, "building")
	if _, err := os.Stat(building); err != nil {
		return
	}
	t.Logf("testserver: waiting for the kube-apiserver build that scripts/test started (%s)", dir)
	start := time.Now()
	for {
		if _, err := os.Stat(building); err != nil {
			failed()
			t.Logf("testserver: kube-apiserver build done after waiting %v", time.Since(start).Round(time.Second))
			return
		}
		if time.Since(start) > KubeBuildWait {
			t.Fatalf("testserver: the kube-apiserver build is still running after %v (%s)", KubeBuildWait, building)
		}
		time.Sleep(2 * time.Second)
	}
}
