package fencek8s_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencek8s"
	"github.com/fencing/fence/fencetest"
	"github.com/fencing/fence/internal/testkit/leakcheck"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func TestMain(m *testing.M) {
	switch {
	case os.Getenv(envMixedRole) != "":
		runMixed(os.Getenv(envMixedRole))
		return
	case os.Getenv(envHolder) != "":
		runHolder()
		return
	}
	leakcheck.VerifyTestMain(m, testserver.IgnoreLeaks())
}

// ttl is the tests' lease TTL: leaseDurationSeconds counts whole seconds.
const ttl = 2 * time.Second

// namespace is where the tests' Leases live; the API server makes it.
const namespace = "default"

// server is how a test process reaches the API server: "host|token|cafile".
type server struct{ host, token, caFile string }

func (s server) String() string { return s.host + "|" + s.token + "|" + s.caFile }

func parseServer(connect string) server {
	p := strings.SplitN(connect, "|", 3)
	return server{p[0], p[1], p[2]}
}

func startKube(t *testing.T) server {
	t.Helper()
	s, _ := startKubeServer(t)
	return s
}

func startKubeServer(t *testing.T) (server, *testserver.KubeServer) {
	t.Helper()
	k := testserver.Kube(t)
	return server{k.Host(), k.Token(), k.CAFile()}, k
}

// clientset returns a clientset of its own (its own connections), and a
// function that closes them.
func clientset(s server) (kubernetes.Interface, func(), error) {
	cfg := &rest.Config{
		Host:            s.host,
		BearerToken:     s.token,
		TLSClientConfig: rest.TLSClientConfig{CAFile: s.caFile},
		QPS:             -1, // no client-side rate limit: the tests contend hard
		Timeout:         30 * time.Second,
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, nil, err
	}
	// Through client-go's wrappers to the transport: http.Client's own
	// CloseIdleConnections does not unwrap them.
	return cs, func() { utilnet.CloseIdleConnectionsFor(hc.Transport) }, nil
}

func mustClientset(t testing.TB, s server) kubernetes.Interface {
	t.Helper()
	cs, closeIdle, err := clientset(s)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeIdle)
	return cs
}

// open is fencetest's Open.
func open(connect string) (fence.Driver, func() error, error) {
	cs, closeIdle, err := clientset(parseServer(connect))
	if err != nil {
		return nil, nil, err
	}
	return fencek8s.New(cs, namespace), func() error { closeIdle(); return nil }, nil
}

// Leases end with their TTL, bound to no session: no KillSession. Store
// deletes the Lease (kubectl delete lease) for both Delete and Wipe: the
// Lease is all the store keeps of a key, its token counter included.
func TestConformance(t *testing.T) {
	fencetest.Run(t, fencetest.Config{
		TTL:            ttl,
		ContenderClock: true,
		Setup: func(t *testing.T) fencetest.Store {
			s, k := startKubeServer(t)
			leases := mustClientset(t, s).CoordinationV1().Leases(namespace)
			del := func(ctx context.Context, key string) error {
				return leases.Delete(ctx, fencek8s.Name(key), metav1.DeleteOptions{})
			}
			return fencetest.Store{
				Connect: s.String(),
				Delete:  del,
				Wipe:    del,
				// A released Lease stays with its counter, naming no
				// holder; one that names a holder is left over, unless
				// its holder stopped renewing it a lease duration ago
				// (a killed process's: no one may have taken it since).
				// The test's clock is the holders' here.
				Leftovers: func(ctx context.Context, prefix string) ([]string, error) {
					list, err := leases.List(ctx, metav1.ListOptions{})
					if err != nil {
						return nil, err
					}
					var left []string
					for _, l := range list.Items {
						key := l.Annotations[fencek8s.AnnotationKey]
						expired := l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil &&
							time.Since(l.Spec.RenewTime.Time) > time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second
						if h := l.Spec.HolderIdentity; strings.HasPrefix(key, prefix) && h != nil && *h != "" && !expired {
							left = append(left, fmt.Sprintf("%s (%q) held by %s", l.Name, key, *h))
						}
					}
					return left, nil
				},
				// The API server killed: its clients' connections are
				// refused. Its etcd, which keeps the Leases, runs on.
				Outage: func(t *testing.T) func() {
					k.Kill()
					return func() {
						if err := k.Start(); err != nil {
							t.Fatalf("restart kube-apiserver: %v", err)
						}
					}
				},
			}
		},
		Open: open,
	})
}
