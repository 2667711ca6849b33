// Package partitiontest checks fence.Partitions across separate OS
// processes on a real store: W worker processes share P partitions, a
// worker is killed with SIGKILL, others join, and the partitions must stay
// owned, balanced within one of P/W, and never worked by two owners at
// once as a guarded resource sees it.
//
// Workers re-execute the test binary, like fencetest's contenders: a
// driver's test calls Run first thing, with all of its setup inside
// Config.Setup, and in a worker process Run finds itself by the test's
// name and runs the worker instead.
//
// The guarded resource lives in the test's process: an HTTP server with
// fencehttp's middleware over a fence.MemoryGuard, one resource per
// partition. Each worker writes to every partition it owns every few
// milliseconds with the partition lease's token, and reports the
// partitions it owns. The check fails if the resource refused any write
// (an older owner wrote after a newer one: two owners at once), if the
// writes it accepted for a partition ever went back in token order or
// came from two workers with one token, if a partition was never worked,
// or if the workers do not reach balance after each change.
package partitiontest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencehttp"
)

// Config describes the store under test.
type Config struct {
	// Setup starts the store and returns how to reach it. It runs in the
	// test's process only.
	Setup func(t *testing.T) string
	// Open returns a new driver for the store, in a worker process.
	Open func(connect string) (drv fence.Driver, close func() error, err error)
	// TTL is the leases' TTL. Default 1s.
	TTL time.Duration
	// Workers is how many workers run at once (default 5), Partitions how
	// many partitions they share (default 32).
	Workers, Partitions int
}

const (
	envWorker  = "PARTITIONTEST_WORKER" // the test's name, in a worker
	envName    = "PARTITIONTEST_NAME"   // the worker's name
	envConnect = "PARTITIONTEST_CONNECT"
	envURL     = "PARTITIONTEST_URL"
	envTTL     = "PARTITIONTEST_TTL"
	envCount   = "PARTITIONTEST_PARTITIONS"
)

// group is the Partitions group every worker joins.
const group = "partitiontest"

func partitionNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("p%02d", i)
	}
	return names
}

// Run runs the check.
func Run(t *testing.T, cfg Config) {
	t.Helper()
	if cfg.TTL == 0 {
		cfg.TTL = time.Second
	}
	if cfg.Workers == 0 {
		cfg.Workers = 5
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 32
	}
	if w := os.Getenv(envWorker); w != "" {
		if w == t.Name() {
			runWorker(t, cfg)
		} else {
			t.Skip("partitiontest: worker process for another test")
		}
		return
	}
	connect := cfg.Setup(t)
	res := newResource()
	srv := httptest.NewServer(res.handler())
	defer srv.Close()
	r := &run{t: t, cfg: cfg, connect: connect, url: srv.URL, res: res, names: partitionNames(cfg.Partitions)}
	defer r.stopAll()

	var live []*worker
	for i := range cfg.Workers {
		live = append(live, r.start(fmt.Sprintf("w%d", i)))
	}
	r.balanced(live, fmt.Sprintf("%d workers started", cfg.Workers))

	live[0].kill()
	live = live[1:]
	r.balanced(live, "after a worker was killed with SIGKILL")

	live = append(live, r.start(fmt.Sprintf("w%d", cfg.Workers)))
	r.balanced(live, "after a worker joined")

	// A kill and a join at once.
	live[0].kill()
	live = append(live[1:], r.start(fmt.Sprintf("w%d", cfg.Workers+1)))
	r.balanced(live, "after a kill and a join at once")

	for _, w := range live {
		w.stop()
	}
	r.check()
	r.allFree()
}

// allFree checks that, every worker gone, no partition or member lease is
// left held.
func (r *run) allFree() {
	r.t.Helper()
	drv, closeDrv, err := r.cfg.Open(r.connect)
	if err != nil {
		r.t.Fatalf("Open: %v", err)
	}
	if closeDrv != nil {
		defer closeDrv()
	}
	c := fence.New(drv)
	ctx, cancel := context.WithTimeout(context.Background(), r.slack())
	defer cancel()
	for i, name := range r.names {
		for _, key := range []string{group + "/partitions/" + name, group + "/members/" + strconv.Itoa(i)} {
			if h, err := c.Inspect(ctx, key); !errors.Is(err, fence.ErrNotHeld) {
				r.t.Errorf("%s after every worker left: holder %+v, %v; want it free", key, h, err)
			}
		}
	}
}

type run struct {
	t       *testing.T
	cfg     Config
	connect string
	url     string
	res     *resource
	names   []string

	mu      sync.Mutex
	workers []*worker
}

func (r *run) slack() time.Duration { return max(10*time.Second, 5*r.cfg.TTL) }

// worker is one worker process.
type worker struct {
	r    *run
	name string
	cmd  *exec.Cmd
	out  *strings.Builder
	done chan struct{}
	err  error
}

func (r *run) start(name string) *worker {
	r.t.Helper()
	pattern := "^" + regexp.QuoteMeta(r.t.Name()) + "$"
	cmd := exec.Command(os.Args[0], "-test.run="+pattern, "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(),
		envWorker+"="+r.t.Name(),
		envName+"="+name,
		envConnect+"="+r.connect,
		envURL+"="+r.url,
		envTTL+"="+r.cfg.TTL.String(),
		envCount+"="+strconv.Itoa(r.cfg.Partitions),
	)
	w := &worker{r: r, name: name, cmd: cmd, out: &strings.Builder{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &lockedWriter{b: w.out}, &lockedWriter{b: w.out}
	if err := cmd.Start(); err != nil {
		r.t.Fatalf("starting worker %s: %v", name, err)
	}
	go func() {
		w.err = cmd.Wait()
		close(w.done)
	}()
	r.mu.Lock()
	r.workers = append(r.workers, w)
	r.mu.Unlock()
	r.t.Logf("worker %s started (pid %d)", name, cmd.Process.Pid)
	return w
}

// kill ends the worker with SIGKILL: it stops renewing at once and its
// leases expire in the store.
func (w *worker) kill() {
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	<-w.done
	w.r.res.forget(w.name)
	w.r.t.Logf("worker %s killed", w.name)
}

// stop asks the worker to leave (Run's context ends: it stops its work and
// releases everything) and waits for it to exit cleanly.
func (w *worker) stop() {
	w.r.res.askStop(w.name)
	select {
	case <-w.done:
		if w.err != nil {
			w.r.t.Errorf("worker %s exited with %v; output:\n%s", w.name, w.err, w.out)
		}
	case <-time.After(w.r.slack()):
		_ = w.cmd.Process.Kill()
		<-w.done
		w.r.t.Errorf("worker %s did not stop within %v; output:\n%s", w.name, w.r.slack(), w.out)
	}
	w.r.res.forget(w.name)
}

func (r *run) stopAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, w := range r.workers {
		_ = w.cmd.Process.Kill()
		<-w.done
	}
}

// balanced waits until the live workers together report every partition,
// none twice, each worker within one of P/W.
func (r *run) balanced(live []*worker, when string) {
	r.t.Helper()
	limit := 30*r.cfg.TTL + r.slack()
	deadline := time.Now().Add(limit)
	start := time.Now()
	for {
		counts, total, clash := map[string]int{}, 0, ""
		owner := map[string]string{}
		lo, hi := len(r.names), 0
		for _, w := range live {
			owned := r.res.owned(w.name, 2*time.Second)
			counts[w.name] = len(owned)
			total += len(owned)
			lo, hi = min(lo, len(owned)), max(hi, len(owned))
			for _, p := range owned {
				if o, ok := owner[p]; ok {
					clash = fmt.Sprintf("%s reported by %s and %s", p, o, w.name)
				}
				owner[p] = w.name
			}
		}
		if clash == "" && total == len(r.names) && hi-lo <= 1 {
			r.t.Logf("%s: balanced after %v: %v", when, time.Since(start).Round(time.Millisecond), counts)
			return
		}
		if time.Now().After(deadline) {
			for _, w := range live {
				r.t.Logf("worker %s output:\n%s", w.name, w.out)
			}
			r.t.Fatalf("%s: not balanced within %v: %v (total %d of %d) %s", when, limit, counts, total, len(r.names), clash)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// check examines the writes the resource saw.
func (r *run) check() {
	r.t.Helper()
	r.res.mu.Lock()
	defer r.res.mu.Unlock()
	if len(r.res.refused) > 0 {
		first := r.res.refused[0]
		r.t.Errorf("the guarded resource refused %d stale writes: a partition was worked by two owners at once; first: %s with token %d",
			len(r.res.refused), first.worker, first.token)
	}
	total := 0
	for _, p := range r.names {
		ws := r.res.accepted[p]
		total += len(ws)
		if len(ws) == 0 {
			r.t.Errorf("partition %s was never worked", p)
			continue
		}
		byToken := map[int64]string{}
		for i, w := range ws {
			if o, ok := byToken[w.token]; ok && o != w.worker {
				r.t.Errorf("partition %s: token %d used by %s and %s", p, w.token, o, w.worker)
			}
			byToken[w.token] = w.worker
			if i > 0 && w.token < ws[i-1].token {
				r.t.Errorf("partition %s: write with token %d by %s accepted after token %d by %s", p, w.token, w.worker, ws[i-1].token, ws[i-1].worker)
			}
		}
	}
	r.t.Logf("the resource accepted %d writes and refused %d", total, len(r.res.refused))
}

// resource is the guarded resource and the workers' reports.
type resource struct {
	guard fence.MemoryGuard

	mu       sync.Mutex
	accepted map[string][]write // by partition, in the order accepted
	refused  []write
	reports  map[string]report // by worker
	stopping map[string]bool
}

type write struct {
	worker string
	token  int64
	at     time.Time
}

type report struct {
	owned []string
	at    time.Time
}

func newResource() *resource {
	return &resource{accepted: map[string][]write{}, reports: map[string]report{}, stopping: map[string]bool{}}
}

func (res *resource) handler() http.Handler {
	mux := http.NewServeMux()
	partition := func(r *http.Request) string { return r.PathValue("partition") }
	record := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := fencehttp.ParseToken(r.Header)
		res.mu.Lock()
		p := partition(r)
		res.accepted[p] = append(res.accepted[p], write{r.URL.Query().Get("worker"), token, time.Now()})
		res.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	guarded := fencehttp.Middleware(&res.guard, partition)(record)
	mux.Handle("POST /write/{partition}", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &statusRecorder{ResponseWriter: w}
		guarded.ServeHTTP(rec, r)
		if rec.status == http.StatusConflict {
			token, _ := fencehttp.ParseToken(r.Header)
			res.mu.Lock()
			res.refused = append(res.refused, write{r.URL.Query().Get("worker") + " on " + partition(r), token, time.Now()})
			res.mu.Unlock()
		}
	}))
	mux.HandleFunc("POST /owned", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		name := r.URL.Query().Get("worker")
		var owned []string
		if s := strings.TrimSpace(string(body)); s != "" {
			owned = strings.Split(s, ",")
		}
		res.mu.Lock()
		stop := res.stopping[name]
		res.reports[name] = report{owned: owned, at: time.Now()}
		res.mu.Unlock()
		if stop {
			_, _ = io.WriteString(w, "stop")
		}
	})
	return mux
}

// owned returns what worker last reported, if it reported within fresh.
func (res *resource) owned(worker string, fresh time.Duration) []string {
	res.mu.Lock()
	defer res.mu.Unlock()
	rep, ok := res.reports[worker]
	if !ok || time.Since(rep.at) > fresh {
		return nil
	}
	return rep.owned
}

func (res *resource) forget(worker string) {
	res.mu.Lock()
	delete(res.reports, worker)
	res.mu.Unlock()
}

func (res *resource) askStop(worker string) {
	res.mu.Lock()
	res.stopping[worker] = true
	res.mu.Unlock()
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

type lockedWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// runWorker is the body of a worker process: it joins the group and works
// its partitions, writing to the resource with their tokens, until the
// test asks it to stop (or its parent is gone).
func runWorker(t *testing.T, cfg Config) {
	name, url := os.Getenv(envName), os.Getenv(envURL)
	ttl, err := time.ParseDuration(os.Getenv(envTTL))
	if err != nil {
		t.Fatalf("worker: bad %s: %v", envTTL, err)
	}
	n, _ := strconv.Atoi(os.Getenv(envCount))
	drv, closeDrv, err := cfg.Open(os.Getenv(envConnect))
	if err != nil {
		t.Fatalf("worker %s: Open: %v", name, err)
	}
	c := fence.New(drv, fence.WithTTL(ttl))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
		if closeDrv != nil {
			_ = closeDrv()
		}
	}()
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := c.Partitions(group, partitionNames(n), fence.WithOwner(name))

	// Report what this worker owns every 50 ms; stop when told to, or when
	// the parent is gone.
	var reporting sync.WaitGroup
	reporting.Go(func() {
		parent := os.Getppid()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if os.Getppid() != parent {
				os.Exit(3)
			}
			resp, err := client.Post(url+"/owned?worker="+name, "text/plain", strings.NewReader(strings.Join(p.Owned(), ",")))
			if err != nil {
				continue
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(body) == "stop" {
				cancel()
				return
			}
		}
	})
	defer reporting.Wait()

	work := func(ctx context.Context, partition string, l *fence.Lease) error {
		for {
			// The write is not cut short when the work must stop: the
			// partition is released only after it has returned, so a write
			// never reaches the resource after the next owner's.
			wctx, cancelWrite := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			req, _ := http.NewRequestWithContext(wctx, http.MethodPost, url+"/write/"+partition+"?worker="+name, nil)
			req.Header.Set(fencehttp.Header, strconv.FormatInt(l.Token(), 10))
			if resp, err := client.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
			cancelWrite()
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	if err := p.Run(ctx, work); err != nil {
		t.Errorf("worker %s: Partitions.Run: %v", name, err)
	}
	if owned := p.Owned(); len(owned) > 0 {
		t.Errorf("worker %s still owns %v after Run returned", name, owned)
	}
}
