package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fencing/fence/fencek8s"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestK8sStore runs the fence binary against a private kube-apiserver
// through a k8s:// URL naming a kubeconfig: tokens grow across runs, a
// held key is refused naming its holder, status and list read the Lease,
// a Lease deleted behind its holder's back stops CMD with exit 76 and
// the next holder's token is still greater, and an API server that does
// not answer is an error, never a free key.
func TestK8sStore(t *testing.T) {
	kube := testserver.Kube(t)
	kubeconfig := kube.Kubeconfig()
	e := &env{t: t, home: t.TempDir(),
		store: (&url.URL{Scheme: "k8s", Path: "/default", RawQuery: url.Values{"kubeconfig": {kubeconfig}}.Encode()}).String()}
	noSecret := func(r result) {
		t.Helper()
		if strings.Contains(r.stdout+r.stderr, kube.Token()) {
			t.Errorf("fence printed the API server's bearer token:\n%s%s", r.stdout, r.stderr)
		}
	}

	var last int64
	for range 2 {
		r := e.run("run", "--ttl", "3s", "--key", "jobs/nightly", "--", "sh", "-c", "echo $FENCE_TOKEN")
		noSecret(r)
		if tok := tokenOf(t, r); tok <= last {
			t.Fatalf("token %d after %d", tok, last)
		} else {
			last = tok
		}
	}

	h, started := e.start("run", "--json", "--ttl", "3s", "--key", "k", "--", "sleep", "60")
	held := num(started["token"])
	r := e.run("run", "--no-wait", "--key", "k", "--", "true")
	noSecret(r)
	if r.code != 75 || !strings.Contains(r.stderr, "pid "+strconv.Itoa(h.cmd.Process.Pid)) ||
		!strings.Contains(r.stderr, fmt.Sprintf("token %d", held)) {
		t.Errorf("run on a held key: exit %d, want 75 naming the holder; stderr:\n%s", r.code, r.stderr)
	}
	r = e.run("status", "--key", "k", "--json")
	var st holderJSON
	if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || r.code != 0 || !st.Held || st.Token != held {
		t.Errorf("status: exit %d, %q; want held with token %d", r.code, r.stdout, held)
	}
	if r := e.run("list", "--json"); r.code != 0 || !strings.Contains(r.stdout, `"k"`) || strings.Contains(r.stdout, "jobs/nightly") {
		t.Errorf("list: exit %d, %q; want k only", r.code, r.stdout)
	}

	// An operator deletes the Lease: the holder's next renewal, conditioned
	// on the resourceVersion it wrote, is refused; CMD is stopped.
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := cs.CoordinationV1().Leases("default").Delete(ctx, fencek8s.Name("k"), metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if ev := h.expect(t, "lost"); ev["reason"] != "refused" {
		t.Errorf("lost event = %v", ev)
	}
	if code := h.wait(t); code != 76 {
		t.Errorf("fence exited %d after its Lease was deleted, want 76; it said:\n%s", code, h.stderr)
	}
	r = e.run("run", "--ttl", "3s", "--key", "k", "--", "sh", "-c", "echo $FENCE_TOKEN")
	if tok := tokenOf(t, r); tok <= held {
		t.Errorf("token %d after the Lease was deleted and recreated; the deleted one had %d", tok, held)
	}

	// An API server that does not answer: an error, not a free key.
	b, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dead := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(dead, []byte(strings.Replace(string(b), kube.Addr(), "127.0.0.1:1", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	e.store = (&url.URL{Scheme: "k8s", Path: "/default", RawQuery: url.Values{"kubeconfig": {dead}}.Encode()}).String()
	for _, args := range [][]string{{"run", "--no-wait", "--key", "k", "--", "true"}, {"status", "--key", "k"}} {
		r := e.run(args...)
		noSecret(r)
		if r.code == 0 || r.code == exitFree || r.code == 75 || !strings.Contains(r.stderr, "connection refused") {
			t.Errorf("fence %s on an unreachable API server: exit %d; stderr:\n%s", args[0], r.code, r.stderr)
		}
	}
}

// TestK8sInCluster runs the fence binary as it runs in a pod: no
// kubeconfig anywhere, the API server named by KUBERNETES_SERVICE_HOST and
// _PORT, and the service account's token, CA certificate and namespace in
// /var/run/secrets/kubernetes.io/serviceaccount. Those files are mounted
// in a mount namespace of the fence process's own, so the machine's /run
// is never touched. A k8s:/// URL must then use the pod's namespace, and
// a wrong token must be an error naming the refusal, not a free key.
func TestK8sInCluster(t *testing.T) {
	kube := testserver.Kube(t)
	unshare, err := exec.LookPath("unshare")
	if err != nil || os.Geteuid() != 0 {
		testserver.Unavailable(t, "a pod's service account is mounted in a mount namespace: needs root and unshare (Debian package util-linux)")
	}
	host, port, err := net.SplitHostPort(kube.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(kube.CAFile())
	if err != nil {
		t.Fatal(err)
	}
	// pod writes a service account directory holding token, and a wrapper
	// that mounts it where client-go looks and execs fence there.
	pod := func(token string) string {
		dir := t.TempDir()
		sa := filepath.Join(dir, "serviceaccount")
		for name, data := range map[string]string{"token": token, "ca.crt": string(ca), "namespace": "kube-system"} {
			if err := os.MkdirAll(sa, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(sa, name), []byte(data), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		wrapper := filepath.Join(dir, "fence-in-pod")
		script := fmt.Sprintf(`#!/bin/sh
exec %s --mount --propagation private sh -c '
  mount -t tmpfs fence-pod /run &&
  mkdir -p /run/secrets/kubernetes.io/serviceaccount &&
  mount --bind "$0" /run/secrets/kubernetes.io/serviceaccount &&
  exec "$@"' %s %s "$@"
`, unshare, sa, fenceBin)
		if err := os.WriteFile(wrapper, []byte(script), 0o700); err != nil {
			t.Fatal(err)
		}
		return wrapper
	}
	e := &env{t: t, home: t.TempDir(), store: "k8s:///", bin: pod(kube.Token()),
		environ: []string{"KUBECONFIG=", "KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port}}

	r := e.run("run", "--ttl", "3s", "--key", "pods/job", "--", "sh", "-c", "echo $FENCE_TOKEN")
	if strings.Contains(r.stdout+r.stderr, kube.Token()) {
		t.Errorf("fence printed the service account's token:\n%s%s", r.stdout, r.stderr)
	}
	tok := tokenOf(t, r)

	// The Lease is in the pod's namespace, written by the run above.
	cfg, err := clientcmd.BuildConfigFromFlags("", kube.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := cs.CoordinationV1().Leases("kube-system").Get(ctx, fencek8s.Name("pods/job"), metav1.GetOptions{}); err != nil {
		t.Errorf("the Lease of a run in the pod's namespace kube-system: %v", err)
	}
	if r := e.run("status", "--key", "pods/job"); r.code != exitFree {
		t.Errorf("status in the pod after the run: exit %d, want %d (free); stderr:\n%s", r.code, exitFree, r.stderr)
	}
	if r := e.run("run", "--ttl", "3s", "--key", "pods/job", "--", "sh", "-c", "echo $FENCE_TOKEN"); tokenOf(t, r) <= tok {
		t.Errorf("second run in the pod: token %d after %d", tokenOf(t, r), tok)
	}

	// A service account token the API server does not know: refused, loudly.
	e.bin = pod("not-a-token")
	for _, args := range [][]string{{"run", "--no-wait", "--key", "pods/job", "--", "true"}, {"status", "--key", "pods/job"}} {
		r := e.run(args...)
		if r.code == 0 || r.code == exitFree || r.code == 75 || !strings.Contains(strings.ToLower(r.stderr), "unauthorized") {
			t.Errorf("fence %s with a wrong service account token: exit %d; stderr:\n%s", args[0], r.code, r.stderr)
		}
	}
}
