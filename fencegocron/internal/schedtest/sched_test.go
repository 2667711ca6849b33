package schedtest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencegocron"
	"github.com/fencing/fence/fenceredis"
	"github.com/fencing/fence/internal/testkit/testserver"
	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// The test binary, rerun with envChild set, is one scheduler (see child).
const (
	envChild = "FENCEGOCRON_SCHED_CHILD" // the locker: "fence" or "noop"
	envRedis = "FENCEGOCRON_SCHED_REDIS" // Redis's address
	envSink  = "FENCEGOCRON_SCHED_SINK"  // the parent's URL, where runs report
)

const (
	schedulers = 3
	ttl        = 2 * time.Second
	hold       = 800 * time.Millisecond // HoldAtLeast: most of the one-second period
	pause      = 2 * ttl                // how long the paused scheduler stays stopped
	resource   = "report"
)

// A job scheduled every second on three schedulers, each in a process of
// its own, over one Redis, for 30 s: every one-second slot runs exactly
// once, none twice. One scheduler is stopped (SIGSTOP) in the middle of a
// run, longer than the TTL, and then writes: the guard refuses its token,
// lower than those of the runs that went on without it.
func TestThreeSchedulersRunEachSlotOnce(t *testing.T) {
	if mode := os.Getenv(envChild); mode != "" {
		child(t, mode)
		return
	}
	if testing.Short() {
		t.Skip("runs for 30 s")
	}
	res := runSchedulers(t, "fence", 30*time.Second, 10)
	for _, p := range res.problems() {
		t.Error(p)
	}
	p := res.paused
	if p == nil {
		t.Fatal("no run was paused")
	}
	switch {
	case res.late == nil:
		t.Errorf("the paused run's late write (slot %d, token %d) was not refused: admitted, or never sent", p.slot, p.token)
	case res.late.Token != p.token || res.late.Highest <= p.token:
		t.Errorf("the paused run's late write (token %d) was refused with %v; want a refusal naming a higher admitted token", p.token, res.late)
	default:
		t.Logf("the paused run's late write: %v", res.late)
	}
	var slots []string
	for _, x := range res.runs {
		slots = append(slots, fmt.Sprintf("%d:%d", x.slot-res.from, x.pid))
	}
	t.Logf("runs (slot from the first checked, pid): %s; paused: slot %d", strings.Join(slots, " "), p.slot-res.from)
	if n := len(res.runs); n < 20 {
		t.Errorf("%d runs in 30 s; want about 30", n)
	}
	if t.Failed() {
		res.logChildren(t)
	}
}

// The check can fail: with a lock that locks nothing, every scheduler runs
// every slot, and the same check reports slots that ran more than once.
func TestNoopLockerRunsSlotsTwice(t *testing.T) {
	if mode := os.Getenv(envChild); mode != "" {
		child(t, mode)
		return
	}
	res := runSchedulers(t, "noop", 6*time.Second, 0)
	probs := res.problems()
	twice := 0
	for _, p := range probs {
		if strings.Contains(p, "times:") {
			twice++
		}
	}
	t.Logf("%d of %d problems are slots run more than once, as %q", twice, len(probs), probs[:min(1, len(probs))])
	if twice == 0 {
		t.Errorf("schedulers without a real lock: problems %q; want slots that ran %d times", probs, schedulers)
		res.logChildren(t)
	}
}

// run is one run of the job, as reported to the parent.
type run struct {
	slot  int64 // the second it was scheduled for (Unix time)
	token int64 // 0 under the no-op locker
	pid   int
}

// result is what the parent saw.
type result struct {
	from, to int64 // the slots checked: every scheduler was up
	runs     []run
	refused  []run             // writes the guard refused
	paused   *run              // the run that was stopped
	late     *fence.StaleError // the guard's refusal of the paused run's write
	children []*testserver.Child
}

// problems checks that every slot from..to ran exactly once, save those
// the paused run's lease kept from every scheduler until it ran out in the
// store (at most a TTL and a period after the paused slot), and that no
// write but the paused run's was refused.
func (r *result) problems() []string {
	bySlot := map[int64][]run{}
	for _, x := range r.runs {
		bySlot[x.slot] = append(bySlot[x.slot], x)
	}
	var probs []string
	var last int64
	for s := r.from; s <= r.to; s++ {
		rs := bySlot[s]
		switch {
		case len(rs) > 1:
			probs = append(probs, fmt.Sprintf("slot %d ran %d times: %+v", s, len(rs), rs))
		case len(rs) == 0 && !r.mayMiss(s):
			probs = append(probs, fmt.Sprintf("slot %d did not run", s))
		case len(rs) == 1 && rs[0].token != 0:
			if rs[0].token <= last {
				probs = append(probs, fmt.Sprintf("slot %d ran with token %d, not above the previous slot's %d", s, rs[0].token, last))
			}
			last = rs[0].token
		}
	}
	for _, x := range r.refused {
		if r.paused == nil || x != *r.paused {
			probs = append(probs, fmt.Sprintf("the guard refused the write of a run that was not paused: %+v", x))
		}
	}
	return probs
}

func (r *result) mayMiss(slot int64) bool {
	return r.paused != nil && slot > r.paused.slot && slot <= r.paused.slot+int64((ttl+time.Second)/time.Second)
}

func (r *result) logChildren(t *testing.T) {
	for i, c := range r.children {
		t.Logf("scheduler %d (pid %d):\n%s", i, c.Pid(), c.Output())
	}
}

// sink is the parent's end: it records each run and, for the runs that
// write, admits or refuses their token through a guard.
type sink struct {
	mu         sync.Mutex
	guard      fence.MemoryGuard
	runs       []run
	refused    []run
	pauseFrom  int64 // the first run of this slot or later is paused; 0: none
	paused     *run
	late       *fence.StaleError
	resumed    chan struct{}
	continued  bool // SIGCONT sent to the paused scheduler
	failures   []string
	background sync.WaitGroup
}

func (k *sink) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	slot, err1 := strconv.ParseInt(q.Get("slot"), 10, 64)
	token, err2 := strconv.ParseInt(q.Get("token"), 10, 64)
	pid, err3 := strconv.Atoi(q.Get("pid"))
	if err := errors.Join(err1, err2, err3); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	x := run{slot: slot, token: token, pid: pid}
	k.mu.Lock()
	defer k.mu.Unlock()
	switch req.URL.Path {
	case "/begin":
		k.runs = append(k.runs, x)
		if k.pauseFrom > 0 && k.paused == nil && slot >= k.pauseFrom {
			k.paused = &x
			k.background.Add(1)
			go k.stopAndResume(pid, token)
			io.WriteString(w, "pause")
			return
		}
		io.WriteString(w, "go")
	case "/write":
		if k.paused != nil && x == *k.paused && !k.continued {
			k.failures = append(k.failures, fmt.Sprintf("scheduler %d wrote for its paused run before it was resumed: it never stopped", pid))
		}
		err := k.guard.Admit(req.Context(), resource, token)
		var stale *fence.StaleError
		switch {
		case errors.As(err, &stale):
			k.refused = append(k.refused, x)
			if k.paused != nil && x == *k.paused {
				k.late = stale
			}
			http.Error(w, err.Error(), http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusBadRequest)
		}
	default:
		http.NotFound(w, req)
	}
}

// stopAndResume waits until the paused scheduler has stopped itself, and
// wakes it once pause has passed and another scheduler's run has written
// with a higher token than the paused run's.
func (k *sink) stopAndResume(pid int, token int64) {
	defer k.background.Done()
	defer close(k.resumed)
	deadline := time.Now().Add(5 * time.Second)
	for !stopped(pid) {
		if time.Now().After(deadline) {
			k.fail(fmt.Sprintf("scheduler %d did not stop itself", pid))
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(pause)
	for k.guard.Highest(resource) <= token {
		if time.Now().After(deadline.Add(pause + 5*time.Second)) {
			k.fail(fmt.Sprintf("no scheduler wrote while scheduler %d was paused", pid))
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !stopped(pid) {
		k.fail(fmt.Sprintf("scheduler %d went on before it was resumed", pid))
	}
	k.mu.Lock()
	k.continued = true
	k.mu.Unlock()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		k.fail(fmt.Sprintf("resuming scheduler %d: %v", pid, err))
	}
}

func (k *sink) fail(msg string) {
	k.mu.Lock()
	k.failures = append(k.failures, msg)
	k.mu.Unlock()
}

// stopped reports whether process pid is stopped (state T in /proc).
func stopped(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'T'
}

// runSchedulers starts the schedulers over one Redis for d and returns what
// they reported. With pauseAfter > 0, the first run that many seconds or
// more after the start is stopped for pause in the middle of its run.
func runSchedulers(t *testing.T, mode string, d time.Duration, pauseAfter int64) *result {
	rs := testserver.Redis(t)
	start := time.Now().Unix()
	k := &sink{resumed: make(chan struct{})}
	if pauseAfter > 0 {
		k.pauseFrom = start + pauseAfter
	}
	srv := httptest.NewServer(k)
	defer srv.Close()
	var children []*testserver.Child
	for range schedulers {
		children = append(children, testserver.Rerun(t, envChild+"="+mode, envRedis+"="+rs.Addr(), envSink+"="+srv.URL))
	}
	time.Sleep(d)
	end := time.Now().Unix()
	if pauseAfter > 0 {
		select {
		case <-k.resumed:
		case <-time.After(pause + 10*time.Second):
			t.Error("the paused scheduler was not resumed")
		}
		time.Sleep(time.Second) // its late write
	}
	for _, c := range children {
		c.Kill()
	}
	k.background.Wait()
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, f := range k.failures {
		t.Error(f)
	}
	// The first slots go to starting the processes, the last one may be
	// cut by the kill.
	return &result{from: start + 3, to: end - 1, runs: slices.Clone(k.runs), refused: slices.Clone(k.refused),
		paused: k.paused, late: k.late, children: children}
}

// child is one scheduler: the job runs every second, on the second, under
// a fencegocron Locker with HoldAtLeast (or, mode "noop", a lock that
// locks nothing), and reports each run to the parent, then writes with
// its token through the parent's guard. The run the parent names stops
// this process (as a long GC pause or a frozen VM would) before writing;
// once resumed, it writes anyway, as a process paused between its last
// check of the lease and its write does, and no longer runs the job.
func child(t *testing.T, mode string) {
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(envRedis), ContextTimeoutEnabled: true})
	defer rdb.Close()
	store, err := fenceredis.New(rdb)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	c := fence.New(store, fence.WithTTL(ttl))
	locker := fencegocron.NewLocker(c, fence.HoldAtLeast(hold))
	g := &gate{Locker: locker}
	if mode == "noop" {
		g.Locker = noopLocker{}
	}
	sink := os.Getenv(envSink)
	report := func(path string, slot, token int64) (string, error) {
		u := fmt.Sprintf("%s/%s?slot=%d&token=%d&pid=%d", sink, path, slot, token, os.Getpid())
		resp, err := http.Get(u)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return "", fmt.Errorf("%s: %s: %s", path, resp.Status, b)
		}
		return string(b), err
	}
	job := func(ctx context.Context, lease *fence.Lease) error {
		slot := time.Now().Unix()
		var token int64
		if lease != nil {
			token = lease.Token()
		}
		say, err := report("begin", slot, token)
		if err != nil {
			fmt.Fprintln(os.Stderr, "begin:", err)
			return err
		}
		if say == "pause" {
			g.retired.Store(true)
			fmt.Printf("slot %d token %d: stopping\n", slot, token)
			if err := stopSelf(); err != nil {
				return err
			}
			fmt.Printf("slot %d token %d: resumed, lease %v\n", slot, token, lease.Err())
		}
		if lease == nil {
			return nil
		}
		if _, err := report("write", slot, token); err != nil {
			fmt.Printf("slot %d token %d: write: %v\n", slot, token, err)
		} else if say == "pause" {
			fmt.Printf("slot %d token %d: write admitted\n", slot, token)
		}
		return nil
	}
	var task any = locker.Task(job)
	if mode == "noop" {
		task = func(ctx context.Context) error { return job(ctx, nil) }
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(g))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.NewJob(gocron.CronJob("* * * * * *", true), gocron.NewTask(task), gocron.WithName("report"),
		gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
			if !errors.Is(err, fence.ErrSkipped) && !errors.Is(err, errRetired) {
				fmt.Fprintln(os.Stderr, "lock:", err)
			}
		}))); err != nil {
		t.Fatal(err)
	}
	s.Start()
	time.Sleep(2 * time.Minute) // killed by the parent long before
}

// stopSelf stops this process with SIGSTOP sent to the calling thread, so
// that the thread stops before it returns from the system call. Sent to
// the process (kill), the signal may be taken by another thread, and on a
// busy machine the caller ran on for milliseconds, long enough to write
// before it stopped.
func stopSelf() error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return syscall.Tgkill(os.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}

var errRetired = errors.New("this scheduler was paused and runs no more")

// gate is the child's locker: after the pause it takes no more leases, so
// that the timers the pause made late do not run the job for a slot that
// has gone by.
type gate struct {
	gocron.Locker
	retired atomic.Bool
}

func (g *gate) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	if g.retired.Load() {
		return nil, errRetired
	}
	return g.Locker.Lock(ctx, key)
}

// noopLocker is the mutant: it locks nothing.
type noopLocker struct{}

func (noopLocker) Lock(context.Context, string) (gocron.Lock, error) { return noopLock{}, nil }

type noopLock struct{}

func (noopLock) Unlock(context.Context) error { return nil }
