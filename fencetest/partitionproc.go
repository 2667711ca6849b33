package fencetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencehttp"
)

// The Partitions check across OS processes: W worker processes share P
// partitions, a worker is killed with SIGKILL, others join, and the
// partitions must stay owned, balanced within one of P/W, and never be
// worked by two owners at once as a guarded resource sees it.
//
// The guarded resource lives in the test's process: an HTTP server with
// fencehttp's middleware over a fence.MemoryGuard, one resource per
// partition. Each worker writes to every partition it owns every few
// milliseconds with the partition lease's token, and reports the
// partitions it owns. The check fails if the resource refused any write
// (an older owner wrote after a newer one: two owners at once), if the
// writes it accepted for a partition ever went back in token order or
// came from two workers with one token, if a partition was never worked,
// if the workers do not reach balance after each change, or if a
// partition or member lease is left once every worker is gone.

const (
	partitionWorkers = 4
	partitionCount   = 16

	envName = "FENCETEST_NAME" // a partition worker's name
	envURL  = "FENCETEST_URL"  // the guarded resource
)

func partitionNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("p%02d", i)
	}
	return names
}

// partitionRun is one run of the process check.
type partitionRun struct {
	s     *suite
	t     *testing.T
	group string
	url   string
	res   *resource
	names []string
	dir   string
}

func (s *suite) partitionProcesses(t *testing.T) {
	res := newResource()
	srv := httptest.NewServer(res.handler())
	defer srv.Close()
	r := &partitionRun{s: s, t: t, group: s.key(t, "g"), url: srv.URL, res: res,
		names: partitionNames(partitionCount), dir: t.TempDir()}

	var live []*partitionProc
	for i := range partitionWorkers {
		live = append(live, r.start(fmt.Sprintf("w%d", i)))
	}
	r.balanced(live, fmt.Sprintf("%d workers started", partitionWorkers))

	live[0].kill()
	live = live[1:]
	r.balanced(live, "after a worker was killed with SIGKILL")

	live = append(live, r.start(fmt.Sprintf("w%d", partitionWorkers)))
	r.balanced(live, "after a worker joined")

	// A kill and a join at once.
	live[0].kill()
	live = append(live[1:], r.start(fmt.Sprintf("w%d", partitionWorkers+1)))
	r.balanced(live, "after a kill and a join at once")

	for _, w := range live {
		w.stop()
	}
	r.check()
	r.allFree()
}

// partitionProc is one worker process.
type partitionProc struct {
	r    *partitionRun
	name string
	p    *process
}

func (r *partitionRun) start(name string) *partitionProc {
	r.t.Helper()
	p := r.s.startWorker(r.t, rolePartition, r.group, r.dir, len(r.names), envName+"="+name, envURL+"="+r.url)
	r.t.Logf("worker %s started (pid %d)", name, p.cmd.Process.Pid)
	return &partitionProc{r: r, name: name, p: p}
}

// kill ends the worker with SIGKILL: it stops renewing at once and its
// leases end in the store.
func (w *partitionProc) kill() {
	w.p.kill()
	w.r.res.forget(w.name)
	w.r.t.Logf("worker %s killed", w.name)
}

// stop asks the worker to leave (its Run's context ends: it stops its work
// and releases everything) and waits for it to exit cleanly.
func (w *partitionProc) stop() {
	w.r.res.askStop(w.name)
	select {
	case <-w.p.done:
		if w.p.err != nil {
			w.r.t.Errorf("worker %s exited with %v; output:\n%s", w.name, w.p.err, w.p.out)
		}
	case <-time.After(w.r.s.slack()):
		w.p.kill()
		w.r.t.Errorf("worker %s did not stop within %v; output:\n%s", w.name, w.r.s.slack(), w.p.out)
	}
	w.r.res.forget(w.name)
}

// balanced waits until the live workers together report every partition,
// none twice, each worker within one of P/W.
func (r *partitionRun) balanced(live []*partitionProc, when string) {
	r.t.Helper()
	limit := 30*r.s.cfg.TTL + 2*r.s.slack()
	deadline := time.Now().Add(limit)
	start := time.Now()
	for {
		owned := map[string][]string{}
		for _, w := range live {
			owned[w.name] = r.res.owned(w.name, 2*time.Second)
		}
		counts, total, spread, clash := tally(owned)
		if clash == "" && total == len(r.names) && spread <= 1 {
			r.t.Logf("%s: balanced after %v: %v", when, time.Since(start).Round(time.Millisecond), counts)
			return
		}
		if time.Now().After(deadline) {
			for _, w := range live {
				r.t.Logf("worker %s output:\n%s", w.name, w.p.out)
			}
			r.t.Fatalf("%s: not balanced within %v: %v (total %d of %d) %s", when, limit, counts, total, len(r.names), clash)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// check examines the writes the resource saw.
func (r *partitionRun) check() {
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

// allFree checks that, every worker gone, no partition or member lease is
// left held (the killed workers' ones have ended in the store).
func (r *partitionRun) allFree() {
	r.t.Helper()
	c := r.s.client(r.t)
	ctx := r.s.ctx(r.t)
	deadline := time.Now().Add(r.s.cfg.TTL + r.s.slack())
	for i, name := range r.names {
		for _, key := range []string{r.group + "/partitions/" + name, r.group + "/members/" + strconv.Itoa(i)} {
			for {
				h, err := c.Inspect(ctx, key)
				if errors.Is(err, fence.ErrNotHeld) {
					break
				}
				if time.Now().After(deadline) {
					r.t.Errorf("%s after every worker left: holder %+v, %v; want it free", key, h, err)
					break
				}
				time.Sleep(r.s.cfg.TTL / 10)
			}
		}
	}
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
		res.accepted[p] = append(res.accepted[p], write{r.URL.Query().Get("worker"), token})
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
			res.refused = append(res.refused, write{r.URL.Query().Get("worker") + " on " + partition(r), token})
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

// partitionWorker is the body of a partition worker process: it joins the
// group and works its partitions, writing to the resource with their
// tokens, until the test asks it to stop (or its parent is gone, which
// runWorker watches).
func partitionWorker(t *testing.T, c *fence.Client, group string, n int) {
	name, url := os.Getenv(envName), os.Getenv(envURL)
	client := &http.Client{Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := c.Partitions(group, partitionNames(n), fence.WithOwner(name))

	// Report what this worker owns every 50 ms; stop when told to.
	var reporting sync.WaitGroup
	reporting.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
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
