package testserver

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// EtcdServer is one private etcd member (etcd 3.4 from Debian's etcd-server).
// Its data survives Kill and Restart.
type EtcdServer struct {
	*Process
	name    string
	peerURL string
	data    string // its data directory
}

// Endpoint returns the member's client URL, "http://127.0.0.1:port".
func (e *EtcdServer) Endpoint() string { return "http://" + e.Addr() }

// Endpoints returns []string{Endpoint()}, the form clientv3.Config takes.
func (e *EtcdServer) Endpoints() []string { return []string{e.Endpoint()} }

// Name returns the member's name in the cluster.
func (e *EtcdServer) Name() string { return e.name }

// EtcdClusterServer is a private etcd cluster on loopback. Kill, Stop and
// Restart its Members one by one to make faults.
type EtcdClusterServer struct {
	Members []*EtcdServer
}

// Endpoints returns every member's client URL.
func (c *EtcdClusterServer) Endpoints() []string {
	out := make([]string, len(c.Members))
	for i, m := range c.Members {
		out[i] = m.Endpoint()
	}
	return out
}

// Etcd starts a single-member etcd on free loopback ports and waits until it
// reports healthy.
func Etcd(t testing.TB, opts ...Option) *EtcdServer {
	t.Helper()
	return EtcdCluster(t, 1, opts...).Members[0]
}

// EtcdCluster starts an n-member etcd cluster (client and peer ports free on
// loopback) and waits until every member reports healthy (/health, which
// needs an elected leader).
func EtcdCluster(t testing.TB, n int, opts ...Option) *EtcdClusterServer {
	t.Helper()
	if n < 1 {
		t.Fatalf("testserver: EtcdCluster needs at least 1 member, got %d", n)
	}
	bin := Require(t, "etcd")
	o := collect(opts)
	o.check(t, "EtcdCluster", credentials{net: true})
	if o.net != nil && o.net.Len() < n {
		t.Fatalf("testserver: EtcdCluster of %d members on a net of %d hosts", n, o.net.Len())
	}
	// Pre-vote, etcd's default from 3.5 (Debian 12 has 3.4, where it is
	// off): without it a member cut off from the others campaigns on its
	// own, raising its term, and once the cut heals that term deposes the
	// majority's leader: seconds without a leader, for nothing.
	extra := []string{"--pre-vote"}
	if etcdHasFlag(bin, "--unsafe-no-fsync") { // etcd >= 3.5; Debian 12 has 3.4
		extra = append(extra, "--unsafe-no-fsync")
	}
	base := dataDir(t, "etcd")
	c := &EtcdClusterServer{}
	startRetrying(t, fmt.Sprintf("etcd cluster of %d", n), func() error {
		c.Members = make([]*EtcdServer, n)
		clientPorts := make([]int, n)
		var initial []string
		for i := range n {
			cp, err := freePort(0)
			if err != nil {
				return err
			}
			pp, err := freePort(0)
			if err != nil {
				return err
			}
			clientPorts[i] = cp
			name := fmt.Sprintf("m%d", i)
			peer := fmt.Sprintf("http://%s:%d", memberIP(o.net, i), pp)
			c.Members[i] = &EtcdServer{name: name, peerURL: peer}
			initial = append(initial, name+"="+peer)
		}
		token := fmt.Sprintf("fence-test-%x", rand.Uint64()) // members of other clusters cannot join
		for i, m := range c.Members {
			data := filepath.Join(base, m.name)
			m.data = data
			if err := os.RemoveAll(data); err != nil { // a failed attempt's state
				return err
			}
			client := fmt.Sprintf("http://%s:%d", memberIP(o.net, i), clientPorts[i])
			args := append([]string{
				"--name", m.name,
				"--data-dir", data,
				"--listen-client-urls", client,
				"--advertise-client-urls", client,
				"--listen-peer-urls", m.peerURL,
				"--initial-advertise-peer-urls", m.peerURL,
				"--initial-cluster", strings.Join(initial, ","),
				"--initial-cluster-state", "new",
				"--initial-cluster-token", token,
				"--logger", "zap",
				"--log-outputs", "stderr",
			}, extra...)
			args = append(args, o.args...)
			m.Process = newProcess(t, procSpec{
				name: "etcd-" + m.name,
				path: bin,
				args: args,
				dir:  base,
				port: clientPorts[i],
				net:  o.net,
				host: i,
				ping: func(ctx context.Context) error { return etcdHealth(ctx, client) },
			})
		}
		// Start members together: each one's readiness needs a quorum.
		ps := make([]*Process, n)
		for i, m := range c.Members {
			ps[i] = m.Process
		}
		return startTogether(ps)
	})
	return c
}

var etcdHelp sync.Map // binary -> its --help text

// etcdHasFlag reports whether the etcd binary knows a flag.
func etcdHasFlag(bin, flag string) bool {
	help, ok := etcdHelp.Load(bin)
	if !ok {
		out, _ := exec.Command(bin, "--help").CombinedOutput()
		help, _ = etcdHelp.LoadOrStore(bin, string(out))
	}
	return strings.Contains(help.(string), flag+" ")
}

// etcdPost posts body as JSON to a member's gRPC gateway (/v3/...) and
// returns the response body; a status other than 200 is an error.
func etcdPost(ctx context.Context, url string, body any) ([]byte, error) {
	j, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(j))
	if err != nil {
		return nil, err
	}
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	return b, err
}

// etcdHealth asks a member's /health, which is true once the cluster has a
// leader and the member can serve.
func etcdHealth(ctx context.Context, endpoint string) error {
	body, err := httpGet(ctx, endpoint+"/health", nil)
	if err != nil {
		return err
	}
	if !strings.Contains(body, `"health":"true"`) {
		return fmt.Errorf("etcd /health: %s", strings.TrimSpace(body))
	}
	return nil
}

// httpGet returns the body of a GET; check, if set, vets the response first.
func httpGet(ctx context.Context, url string, check func(*http.Response) error) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return "", err
	}
	if check != nil {
		if err := check(resp); err != nil {
			return string(b), err
		}
	}
	return string(b), nil
}

// noKeepAlive is for pings: a kept-alive connection to a server that is
// then killed or paused would only confuse the next ping.
var noKeepAlive = &http.Client{
	Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
	Timeout:   10 * time.Second,
}
