package fencek8s_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencehttp"
	"github.com/fencing/fence/fencek8s"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func newFence(t *testing.T, s server, opts ...fence.ClientOption) *fence.Client {
	t.Helper()
	c := fence.New(fencek8s.New(mustClientset(t, s), namespace), append([]fence.ClientOption{fence.WithTTL(ttl)}, opts...)...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// TestStorePaused pauses the API server, or its etcd, past the TTL: the
// holder cannot renew and loses its lease on its own clock; once the store
// answers again a contender gets the key with a greater token, and the old
// holder's late Release does not touch it.
func TestStorePaused(t *testing.T) {
	k := testserver.Kube(t)
	s := server{k.Host(), k.Token(), k.CAFile()}
	for _, tc := range []struct {
		name string
		p    *testserver.Process
	}{
		{"apiserver", k.Process},
		{"etcd", k.Etcd.Process},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := ctxT(t)
			key := "paused-" + tc.name
			a, b := newFence(t, s), newFence(t, s)
			l, err := a.Acquire(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			tc.p.Stop()
			paused := time.Now()
			select {
			case <-l.Done():
				t.Logf("lease lost %v after the pause", time.Since(paused))
			case <-time.After(ttl + 5*time.Second):
				tc.p.Cont()
				t.Fatalf("lease still valid %v after the %s paused (TTL %v)", ttl+5*time.Second, tc.name, ttl)
			}
			time.Sleep(ttl)
			tc.p.Cont()
			var lost *fence.LostError
			if !errors.As(l.Err(), &lost) || lost.Reason != fence.LossExpired {
				t.Errorf("cause %v; want a *LostError with reason %q", l.Err(), fence.LossExpired)
			}
			l2, err := b.Acquire(ctx, key, fence.WithWait(time.Minute))
			if err != nil {
				t.Fatalf("Acquire after the %s came back: %v", tc.name, err)
			}
			if l2.Token() <= l.Token() {
				t.Errorf("token %d after %d", l2.Token(), l.Token())
			}
			if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
				t.Errorf("old holder's Release: %v; want ErrLost", err)
			}
			if h, err := b.Inspect(ctx, key); err != nil || h.Owner != l2.Owner() {
				t.Errorf("after the old holder's Release, Inspect = %+v, %v; want the new holder", h, err)
			}
			if err := l2.Release(ctx); err != nil {
				t.Error(err)
			}
		})
	}
}

// Environment of the paused-holder process (TestPausedHolderRefused).
const (
	envHolder = "FENCEK8S_TEST_HOLDER" // connect string
	envTarget = "FENCEK8S_TEST_TARGET" // URL of the guarded resource
)

// runHolder is the paused holder: it takes the key, prints its token,
// and on each line of stdin writes to the guarded resource with that
// token, printing the answer's status.
func runHolder() {
	ctx := context.Background()
	drv, closeDrv, err := open(os.Getenv(envHolder))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	defer closeDrv()
	c := fence.New(drv, fence.WithTTL(ttl))
	l, err := c.Acquire(ctx, "paused-holder")
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	token := l.Token() // read once, as a worker would before a long step
	fmt.Println("token", token)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		req, _ := http.NewRequest(http.MethodPost, os.Getenv(envTarget), strings.NewReader("holder"))
		req.Header.Set(fencehttp.Header, strconv.FormatInt(token, 10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			fmt.Println("error", err)
			continue
		}
		resp.Body.Close()
		fmt.Println("status", resp.StatusCode)
	}
}

// TestPausedHolderRefused: a holder process frozen with SIGSTOP past its
// TTL loses the key to another holder, which writes to a guarded HTTP
// resource; the frozen holder, resumed, writes with its old token at
// once, and the guard refuses it.
func TestPausedHolderRefused(t *testing.T) {
	s := startKube(t)
	ctx := ctxT(t)
	var guard fence.MemoryGuard
	var (
		mu      sync.Mutex
		written []string
	)
	resource := httptest.NewServer(fencehttp.Middleware(&guard, func(*http.Request) string { return "r" })(
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b, _ := io.ReadAll(r.Body)
			mu.Lock()
			written = append(written, string(b))
			mu.Unlock()
		})))
	defer resource.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHolder+"="+s.String(), envTarget+"="+resource.URL)
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	out := bufio.NewScanner(stdout)
	line := func() string {
		if !out.Scan() {
			t.Fatalf("holder process ended: %v", out.Err())
		}
		return out.Text()
	}
	var old int64
	if _, err := fmt.Sscanf(line(), "token %d", &old); err != nil {
		t.Fatalf("holder process: %v", err)
	}
	fmt.Fprintln(stdin, "write")
	if got := line(); got != "status 200" {
		t.Fatalf("holder's write while it holds the key: %q; want status 200", got)
	}

	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	l, err := newFence(t, s).Acquire(ctx, "paused-holder", fence.WithWait(time.Minute))
	if err != nil {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		t.Fatalf("Acquire while the holder is frozen: %v", err)
	}
	defer l.Release(ctx)
	if l.Token() <= old {
		t.Errorf("new holder's token %d after the frozen holder's %d", l.Token(), old)
	}
	if err := fencehttp.CheckResponse(post(t, resource.URL, l.Token(), "new")); err != nil {
		t.Fatalf("new holder's write: %v", err)
	}

	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, "write")
	if got := line(); got != "status 409" {
		t.Errorf("frozen holder's late write with token %d: %q; want status 409 (refused)", old, got)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(written, ",") != "holder,new" {
		t.Errorf("resource got writes %q; want the holder's, then the new holder's only", written)
	}
}

func post(t *testing.T, url string, token int64, body string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set(fencehttp.Header, strconv.FormatInt(token, 10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp
}
