package torture

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/testkit/faultproxy"
)

// Fault is a fault plan: what the parent does to the workers, the network
// or the store while the workers run.
type Fault string

// The fault plans.
const (
	// FaultNone injects nothing: the baseline.
	FaultNone Fault = "none"
	// FaultPause stops a worker that has just acquired with SIGSTOP for
	// twice the TTL, then resumes it with SIGCONT: docs/design.md section 1.
	FaultPause Fault = "pause"
	// FaultBlackhole cuts a worker that has just acquired from the store
	// and the register (its proxies hold every byte, both ways) for twice
	// the TTL, then heals: a partition.
	FaultBlackhole Fault = "blackhole"
	// FaultDelay delays a holder's traffic to the store and the register,
	// alternately by a third of the TTL and by 0.6 TTL (both ±jitter) each
	// way, for twice the TTL: slow renewals, and acquire replies that
	// arrive after the lease has expired.
	FaultDelay Fault = "delay"
	// FaultKill kills a worker that holds a lease with SIGKILL, at a random
	// point in its writes, and starts a new worker in its place.
	FaultKill Fault = "kill"
	// FaultRestart kills the store's server (or one cluster member), keeps
	// it down for 1.5 TTL and restarts it. Only for servers the tool
	// started itself.
	FaultRestart Fault = "restart"
	// FaultRestartEmpty kills the store's server (or one member) while a
	// worker holds a lease and starts it again at once with the data
	// directory it had before fence used it: the store comes back empty
	// within the holder's validity (the plan's TTL is raised above the
	// server's start time where needed). Only for servers the tool
	// started itself.
	FaultRestartEmpty Fault = "restart-empty"
	// FaultWipe removes the store's own state (a file store's files, the
	// rows of an SQL store's tables, FLUSHALL, an etcd prefix, a NATS
	// bucket) behind fence's back while a worker holds a lease; the store
	// keeps running.
	FaultWipe Fault = "wipe"
	// FaultClockJump steps the store server's wall clock forward by
	// twice the TTL while a worker holds a lease, as a wrong NTP step
	// would, and back again a TTL later (testserver.FakeClock). Forward,
	// a store that times leases by its own clock ends the holder's lease
	// early, while the holder still believes in it; back, tokens seeded
	// from the clock must not go back. Only for servers the tool started
	// on a fake clock (testserver.Clock: not the Go ones, etcd, NATS and
	// kube-apiserver).
	FaultClockJump Fault = "clock-jump"
	// FaultPartition cuts one member of a cluster from its peers (its
	// leader, then a follower, in turn) while a worker holds a lease, for
	// as long as a pause lasts and at least until the others have elected
	// a leader, then heals. The holder's client is left with the member
	// cut off and no other; every other worker still reaches every
	// member. A leader cut off goes on answering its clients for a while
	// without a quorum (the Jepsen etcd lock scenario). Only for clusters
	// the tool started on test hosts of their own (testserver.Net).
	FaultPartition Fault = "partition"
)

// Faults lists every fault plan, in the summary's order.
var Faults = []Fault{FaultNone, FaultPause, FaultBlackhole, FaultDelay, FaultKill, FaultRestart, FaultRestartEmpty, FaultWipe, FaultClockJump, FaultPartition}

// hitsStore reports whether the fault acts on the store itself (its
// server or its data), and so on every plan running against it at the
// time: such a plan runs alone.
func (f Fault) hitsStore() bool {
	return f == FaultRestart || f == FaultRestartEmpty || f == FaultWipe || f == FaultClockJump || f == FaultPartition
}

// ParseFault returns the fault plan named s.
func ParseFault(s string) (Fault, error) {
	for _, f := range Faults {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("unknown fault %q (known: %s)", s, faultNames())
}

func faultNames() string {
	names := make([]string, len(Faults))
	for i, f := range Faults {
		names[i] = string(f)
	}
	return strings.Join(names, ", ")
}

// LeaseKind is what a plan's workers acquire.
type LeaseKind string

// The lease kinds.
const (
	// KindLock: Client.Acquire, one holder at a time.
	KindLock LeaseKind = "lock"
	// KindSemaphore: a slot of Client.Semaphore(key, Config.Limit); more
	// workers than slots contend.
	KindSemaphore LeaseKind = "semaphore"
	// KindRW: Client.RWMutex, each lease the read or the write side at
	// random. Readers read the register where writers write it.
	KindRW LeaseKind = "rw"
)

// LeaseKinds lists every lease kind.
var LeaseKinds = []LeaseKind{KindLock, KindSemaphore, KindRW}

// ParseLeaseKind returns the lease kind named s.
func ParseLeaseKind(s string) (LeaseKind, error) {
	for _, k := range LeaseKinds {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown lease kind %q (known: lock, semaphore, rw)", s)
}

// fenceKinds are the fence kinds a plan of k acquires.
func (k LeaseKind) fenceKinds() []fence.Kind {
	switch k {
	case KindSemaphore:
		return []fence.Kind{fence.KindSemaphore}
	case KindRW:
		return []fence.Kind{fence.KindRead, fence.KindWrite}
	}
	return []fence.Kind{fence.KindLock}
}

// Config is one torture plan.
type Config struct {
	Fault    Fault
	Workers  int           // worker processes; default 3
	Writes   int           // protected writes per lease; default 3 (partition: a lease of two TTLs)
	Keys     int           // keys contended for; default 1
	TTL      time.Duration // lease TTL; default 1s
	Duration time.Duration // how long the workers run; default 6s
	Work     time.Duration // the slow step before each write; default 30ms
	NoGuard  bool          // writes bypass the token check
	Register string        // RegisterMemory (default) or RegisterPostgres
	// Kind is what the workers acquire; default KindLock.
	Kind LeaseKind
	// Limit is a semaphore's number of slots; default 2. The workers
	// default to two more than the limit, so that some always wait.
	Limit int
	// RegisterDSN is the PostgreSQL the postgres register lives in.
	RegisterDSN string
	// Command returns the command that runs a worker; its process must
	// call WorkerMain when IsWorker. Default: this program, re-executed.
	Command func() *exec.Cmd
	// LogDir receives the workers' standard error; default: a new
	// temporary directory, named in the Result.
	LogDir string
	// HTMLDir, if set, receives porcupine's visualization of a history
	// that is not linearizable.
	HTMLDir string
	// CheckTimeout bounds the linearizability check; default 60s.
	CheckTimeout time.Duration
	Seed         uint64
	// Progress, if set, receives a line per fault injected.
	Progress io.Writer
	// Worker is what holds the leases; default WorkerLibrary. Fence is
	// the fence binary WorkerFenceRun runs (BuildFence).
	Worker WorkerKind
	Fence  string

	// guardWait, if set, is a wait in the postgres register's write
	// between the guard's check and the write: a slow write.
	guardWait time.Duration
	// brokenGuard replaces fencepg's guard with a deliberately non-atomic
	// one: it reads the highest token, waits guardWait, then writes its
	// own unconditionally.
	brokenGuard bool
	// writeTimeout bounds each write; default the TTL.
	writeTimeout time.Duration
	// pauseAt, if set, is when after a grant the pause lands, instead of
	// a random point in the first slow step.
	pauseAt time.Duration
	// cutFor, if set, is how long each fault episode lasts, instead of
	// the store's cutTime.
	cutFor time.Duration
}

// Registers the workers can write to.
const (
	RegisterMemory   = "memory"
	RegisterPostgres = "postgres"
	// RegisterPostgresGuardOnly is the postgres register without the
	// row lock each write takes before it calls the guard: only the guard
	// serializes the writes of one key, so a guard that is not atomic
	// with the write shows (see TestGuardOnlyRegister).
	RegisterPostgresGuardOnly = "postgres-guard-only"
)

func (c *Config) defaults() {
	if c.Fault == "" {
		c.Fault = FaultNone
	}
	if c.Kind == "" {
		c.Kind = KindLock
	}
	if c.Limit <= 0 {
		c.Limit = 2
	}
	if c.Workers <= 0 {
		c.Workers = 3
		if c.Kind == KindSemaphore {
			c.Workers = c.Limit + 2
		}
	}
	if c.Keys <= 0 {
		c.Keys = 1
	}
	if c.TTL <= 0 {
		c.TTL = time.Second
	}
	if c.Duration <= 0 {
		c.Duration = 6 * time.Second
	}
	if c.Work <= 0 {
		c.Work = 30 * time.Millisecond
	}
	if c.Writes <= 0 {
		c.Writes = 3
		if c.Fault == FaultPartition {
			// A holder the cut strands must outlive its validity, or
			// it releases before the cut reaches it.
			c.Writes = int(2*c.TTL/c.Work) + 1
		}
		if c.Worker == WorkerFenceRun {
			// A fence run's command must still be writing when its
			// fence run, paused for two TTLs, wakes and loses the
			// lease: or there is nothing for fence run to stop.
			c.Writes = int(3*c.TTL/c.Work) + 1
		}
	}
	if c.Register == "" {
		c.Register = RegisterMemory
	}
	if c.CheckTimeout <= 0 {
		c.CheckTimeout = time.Minute
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	if c.Worker == "" {
		c.Worker = WorkerLibrary
	}
	if c.Command == nil {
		c.Command = func() *exec.Cmd {
			exe, err := os.Executable()
			if err != nil {
				exe = os.Args[0]
			}
			return exec.Command(exe)
		}
	}
}

// Run runs one torture plan against store and checks its history.
func Run(ctx context.Context, store *Store, cfg Config) (*Result, error) {
	cfg.defaults()
	if cfg.TTL < store.minTTL {
		cfg.TTL = store.minTTL
	}
	if cfg.Fault == FaultRestartEmpty && cfg.TTL < store.emptyTTL {
		cfg.TTL = store.emptyTTL // the store must be back while the holder's lease is valid
	}
	if cfg.Fault == FaultRestart && cfg.Duration < store.restartFor+3*cfg.TTL {
		cfg.Duration = store.restartFor + 3*cfg.TTL // a failover, and work after it
	}
	// Room for one fault episode at least.
	min := store.cutTime(cfg.Fault, cfg.TTL) + 2*cfg.TTL
	if cfg.cutFor > 0 {
		min = cfg.cutFor + 2*cfg.TTL
	}
	if cfg.Fault == FaultPartition {
		min += time.Duration(cfg.Writes) * cfg.Work // a holder to strand: a lease's length
	}
	if (cfg.Fault == FaultRestart || cfg.Fault == FaultPartition) && store.grantWithin > 0 {
		// Room for the first episode's grant to be checked (checkGrants).
		min = max(min, store.grantWithin+3*cfg.TTL+time.Duration(cfg.Writes)*cfg.Work)
	}
	if cfg.Fault != FaultNone && cfg.Duration < min {
		cfg.Duration = min
	}
	r := &Result{Store: store.Name, Fault: cfg.Fault, Kind: cfg.Kind, Guard: !cfg.NoGuard, TTL: cfg.TTL, grantWithin: store.grantWithin}
	if cfg.Worker == WorkerFenceRun {
		if cfg.Kind != KindLock || cfg.Fence == "" {
			return nil, fmt.Errorf("the fence-run worker takes locks (not %s), with Config.Fence set (%q)", cfg.Kind, cfg.Fence)
		}
		r.Store += " (fence run)"
	}
	if cfg.Kind == KindSemaphore {
		r.Limit = cfg.Limit
	}
	why := store.notApplicable(cfg.Fault)
	if why == "" {
		var err error
		if why, err = store.supports(ctx, cfg.Kind); err != nil {
			return nil, err
		}
	}
	if why != "" {
		r.NA = why
		return r, nil
	}
	p := &plan{cfg: cfg, store: store, acquired: make(chan *slot, 64), rng: rand.New(rand.NewPCG(cfg.Seed, 1))}
	start := time.Now()
	err := p.run(ctx, r)
	r.Duration = time.Since(start)
	return r, err
}

// plan is one run in the parent.
type plan struct {
	cfg   Config
	store *Store
	reg   registerServer
	slots []*slot
	keys  []string
	rng   *rand.Rand

	mu       sync.Mutex
	events   []Event
	nextID   int
	acquired chan *slot // a worker in this slot just acquired
	readers  sync.WaitGroup
	// faultErr is why a fault could not be injected: the plan proves
	// nothing then, and fails.
	faultErr error
	// runPauses counts a fence-run plan's pauses (signalFenceRun).
	runPauses int
	// grants counts the leases granted, lastGrant is Now() at the
	// latest, and ended and lastEnd the same of the fault episodes that
	// ended; guarded by mu (faults reads them to end a plan).
	grants, ended      int
	lastGrant, lastEnd int64
}

// slot is a place for one worker, with its own proxies to the store's
// servers and to the register. A killed worker's replacement takes its slot.
type slot struct {
	idx      int
	proxies  []*faultproxy.Proxy // to the store's servers, in order
	regProxy *faultproxy.Proxy
	proc     *proc // current worker; guarded by plan.mu
}

type proc struct {
	ready   chan struct{} // closed at its first event
	id      int
	cmd     *exec.Cmd
	stdin   io.WriteCloser
	done    chan struct{} // closed when it exited and its events are read
	holding bool          // guarded by plan.mu
	stopped bool          // SIGSTOPped; guarded by plan.mu
	run     runProc       // a fence-run worker's; guarded by plan.mu
}

func (p *plan) run(ctx context.Context, r *Result) (err error) {
	cfg := p.cfg
	if cfg.LogDir == "" {
		if cfg.LogDir, err = os.MkdirTemp("", "fence-torture-"); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(cfg.LogDir, 0o755); err != nil {
		return err
	}
	r.LogDir = cfg.LogDir
	p.cfg.LogDir = cfg.LogDir
	suffix := fmt.Sprintf("%x", rand.Uint32())
	for i := range cfg.Keys {
		p.keys = append(p.keys, fmt.Sprintf("torture/%s/%s/k%d", cfg.Fault, suffix, i))
	}

	switch cfg.Register {
	case RegisterMemory:
		p.reg, err = newMemRegister(cfg.NoGuard)
	case RegisterPostgres, RegisterPostgresGuardOnly:
		if cfg.RegisterDSN == "" {
			return errors.New("the postgres register needs a PostgreSQL (Config.RegisterDSN)")
		}
		p.reg, err = newPGRegister(ctx, cfg.RegisterDSN, p.keys)
	default:
		err = fmt.Errorf("unknown register %q", cfg.Register)
	}
	if err != nil {
		return err
	}
	defer p.reg.Close()

	for i := range cfg.Workers {
		s := &slot{idx: i}
		p.slots = append(p.slots, s)
		for _, addr := range p.store.addrs {
			px, err := faultproxy.New(addr)
			if err != nil {
				return err
			}
			defer px.Close()
			s.proxies = append(s.proxies, px)
		}
		if s.regProxy, err = faultproxy.New(p.reg.Addr()); err != nil {
			return err
		}
		defer s.regProxy.Close()
	}
	defer p.killAll()
	for _, s := range p.slots {
		if err := p.spawn(s); err != nil {
			return err
		}
	}

	// The plan's clock starts once every worker is up (started, store and
	// register open): starting processes is slow on a loaded machine.
	// One deadline for all: a time.After channel would fire for the
	// first worker still starting only, and leave the wait for the next
	// one unbounded.
	readyCtx, readyCancel := context.WithTimeout(ctx, workerStart)
	for _, s := range p.slots {
		select {
		case <-s.proc.ready:
		case <-readyCtx.Done():
			readyCancel()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("worker %d did not start within %v: it cannot open the store or the register (its standard error says why; see --logs)", s.proc.id, workerStart)
		}
	}
	readyCancel()
	deadline := time.Now().Add(cfg.Duration)
	p.faults(ctx, deadline)
	if p.faultErr != nil {
		return p.faultErr
	}
	for _, s := range p.slots {
		for _, px := range s.proxies {
			px.Heal()
		}
		s.regProxy.Heal()
	}
	p.stopAll()
	end := Now()

	applied, err := p.reg.Log(ctx)
	if err != nil {
		return fmt.Errorf("reading the register's log: %w", err)
	}
	p.mu.Lock()
	events := append([]Event(nil), p.events...)
	p.mu.Unlock()
	writeHistory(filepath.Join(cfg.LogDir, fmt.Sprintf("%s-%s-history.jsonl", p.name(), guardName(r.Guard))), events, applied)
	analyze(r, events, applied, end, cfg.CheckTimeout)
	if cfg.Worker == WorkerFenceRun {
		r.Violations = append(r.Violations, checkFenceRun(events, cfg.TTL)...)
	}
	if r.Linearizable != "Ok" && cfg.HTMLDir != "" {
		_ = os.MkdirAll(cfg.HTMLDir, 0o755)
		path := filepath.Join(cfg.HTMLDir, fmt.Sprintf("torture-%s-%s.html", p.name(), guardName(r.Guard)))
		if err := writeHTML(r, events, path); err != nil {
			r.Violations = append(r.Violations, "writing the visualization: "+err.Error())
		} else {
			r.HTML = path
		}
	}
	return nil
}

// writeHistory saves the events, then the register's log, one JSON object
// a line, for a look after the fact. Failing to is not worth failing for.
func writeHistory(path string, events []Event, applied []Applied) {
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, e := range events {
		_ = enc.Encode(e)
	}
	for _, a := range applied {
		_ = enc.Encode(struct {
			Applied Applied `json:"applied"`
		}{a})
	}
	_ = w.Flush()
}

// name names the plan's files: the store and the fault, and the lease
// kind but for locks (whose files keep the names they always had).
func (p *plan) name() string {
	if p.cfg.Worker == WorkerFenceRun {
		return fmt.Sprintf("%s-fence-run-%s", safeName(p.store.Name), p.cfg.Fault)
	}
	if p.cfg.Kind == KindLock {
		return fmt.Sprintf("%s-%s", safeName(p.store.Name), p.cfg.Fault)
	}
	return fmt.Sprintf("%s-%s-%s", safeName(p.store.Name), p.cfg.Kind, p.cfg.Fault)
}

func guardName(g bool) string {
	if g {
		return "guard"
	}
	return "noguard"
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, s)
}

// record appends a parent event.
func (p *plan) record(e Event) {
	if e.T == 0 {
		e.T = Now()
	}
	p.mu.Lock()
	p.events = append(p.events, e)
	p.mu.Unlock()
}

func (p *plan) fault(desc string, end bool) {
	p.record(Event{W: -1, Op: OpFault, Fault: desc, End: end})
	if end {
		p.episodeEnded()
	} else {
		fmt.Fprintf(p.cfg.Progress, "  %s %s: %s\n", p.store.Name, p.cfg.Fault, desc)
	}
}

// spawn starts a new worker in slot s.
func (p *plan) spawn(s *slot) error {
	p.mu.Lock()
	id := p.nextID
	p.nextID++
	p.mu.Unlock()
	addrs := make([]string, len(s.proxies))
	for i, px := range s.proxies {
		addrs[i] = px.Addr()
	}
	wc := workerConfig{
		ID:       id,
		Store:    p.store.url(addrs, p.cfg.TTL),
		Register: p.reg.ClientURL(s.regProxy.Addr()),
		RegKind:  p.cfg.Register,
		NoGuard:  p.cfg.NoGuard,
		Wait:     p.cfg.guardWait,
		Broken:   p.cfg.brokenGuard,
		WriteFor: p.cfg.writeTimeout,
		Keys:     p.keys,
		Kind:     p.cfg.Kind,
		Limit:    p.cfg.Limit,
		TTL:      p.cfg.TTL,
		Writes:   p.cfg.Writes,
		Work:     p.cfg.Work,
		Seed:     p.cfg.Seed,
		Worker:   p.cfg.Worker,
		Fence:    p.cfg.Fence,
	}
	js, _ := json.Marshal(wc)
	cmd := p.cfg.Command()
	cmd.Env = append(os.Environ(), WorkerEnv+"="+string(js))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	logf, err := os.Create(filepath.Join(p.cfg.LogDir, fmt.Sprintf("%s-worker%d.log", p.name(), id)))
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own copy
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting worker: %w", err)
	}
	pr := &proc{id: id, cmd: cmd, stdin: stdin, done: make(chan struct{}), ready: make(chan struct{})}
	p.mu.Lock()
	s.proc = pr
	p.mu.Unlock()
	p.readers.Add(1)
	go p.read(s, pr, stdout)
	return nil
}

// read collects a worker's events until it exits.
func (p *plan) read(s *slot, pr *proc, stdout io.Reader) {
	defer p.readers.Done()
	defer close(pr.done)
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var readyOnce sync.Once
	defer readyOnce.Do(func() { close(pr.ready) })
	for sc.Scan() {
		readyOnce.Do(func() { close(pr.ready) })
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			continue // not an event: a stray line
		}
		e.W = pr.id
		p.mu.Lock()
		p.events = append(p.events, e)
		p.noteRun(pr, e)
		switch {
		case e.Op == OpAcquire && e.Ph == Ret && e.Res == ResOK:
			pr.holding = true
			p.grants++
			p.lastGrant = max(p.lastGrant, e.T)
		case e.Op == OpRelease && e.Ph == Call, e.Op == OpLost:
			pr.holding = false
		}
		p.mu.Unlock()
		if e.Op == OpAcquire && e.Ph == Ret && e.Res == ResOK {
			select {
			case p.acquired <- s:
			default:
			}
		}
	}
	_ = pr.cmd.Wait()
	p.mu.Lock()
	pr.holding = false
	p.mu.Unlock()
	p.record(Event{W: pr.id, Op: OpExit})
}

// stopAll resumes every worker, asks each to stop (closing its standard
// input: it releases its lease and exits) and waits for them, killing any
// that does not end in time.
func (p *plan) stopAll() {
	p.mu.Lock()
	var procs []*proc
	for _, s := range p.slots {
		if s.proc != nil {
			procs = append(procs, s.proc)
		}
	}
	p.mu.Unlock()
	for _, pr := range procs {
		_ = pr.cmd.Process.Signal(syscall.SIGCONT)
		_ = pr.stdin.Close()
	}
	timeout := time.After(6*p.cfg.TTL + 10*time.Second)
	for _, pr := range procs {
		select {
		case <-pr.done:
		case <-timeout:
			p.record(Event{W: pr.id, Op: OpKill})
			_ = pr.cmd.Process.Kill()
			<-pr.done
		}
	}
	p.readers.Wait()
}

// killAll kills whatever still runs (after an error).
func (p *plan) killAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, s := range p.slots {
		if s.proc != nil && s.proc.cmd.ProcessState == nil {
			_ = s.proc.cmd.Process.Kill()
		}
	}
}

// holder waits for a worker that has just acquired and still holds its
// lease, until deadline. nil if none came.
func (p *plan) holder(ctx context.Context, deadline time.Time) (*slot, *proc) {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, nil
		case <-timer.C:
			return nil, nil
		case s := <-p.acquired:
			p.mu.Lock()
			pr := s.proc
			ok := pr != nil && pr.holding && !pr.stopped
			p.mu.Unlock()
			if ok {
				return s, pr
			}
		}
	}
}

// drain forgets acquisitions seen so far, so the next fault targets a
// fresh one.
func (p *plan) drain() {
	for {
		select {
		case <-p.acquired:
		default:
			return
		}
	}
}

func (p *plan) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return time.Duration(p.rng.Int64N(int64(d)))
}

// faults injects the plan's fault until deadline. Every episode it starts
// ends before the deadline, so the workers run their last stretch
// undisturbed and the plan ends clean. A plan that has not proved
// anything by then (proved) goes on, for a while (see last).
func (p *plan) faults(ctx context.Context, deadline time.Time) {
	ttl := p.cfg.TTL
	cut := p.store.cutTime(p.cfg.Fault, ttl)
	if p.cfg.cutFor > 0 {
		cut = p.cfg.cutFor
	}
	episode := cut + ttl/2 // the longest episode, and a margin
	if p.cfg.Fault == FaultRestart {
		episode = max(episode, p.store.restartFor+ttl/2)
	}
	// A loaded machine starts workers, grants and recovers slowly. A
	// plan that would end having proved nothing (no episode, or nothing
	// granted after its last) goes on, up to its duration again, or
	// three times as long as the store may keep a silent holder's lease
	// if that is longer (a Kubernetes Lease: whole seconds, plus two): a
	// slow machine makes a plan longer, never pass wrongly.
	last := deadline.Add(max(p.cfg.Duration, 3*p.store.holdTime(ttl)))
	fits := func() time.Time {
		if p.proved() == errNoEpisode {
			return last.Add(-episode)
		}
		return deadline.Add(-episode)
	}
	wait := func(d time.Duration) { sleep(ctx, d) }
	defer func() {
		wait(time.Until(deadline))
		for p.faultErr == nil && p.proved() != nil && time.Now().Before(last) && ctx.Err() == nil {
			wait(min(ttl/4, time.Until(last)))
		}
	}()

	// Let every worker start and the first holder settle in.
	wait(ttl / 2)
	switch p.cfg.Fault {
	case FaultNone:
		wait(time.Until(deadline))
	case FaultPause:
		for n := 1; time.Now().Before(fits()); n++ {
			p.drain()
			_, pr := p.holder(ctx, fits())
			if pr == nil {
				break
			}
			if p.cfg.pauseAt > 0 {
				wait(p.cfg.pauseAt)
			} else {
				wait(p.jitter(p.cfg.Work / 2)) // into the slow step before a write
			}
			p.signal(pr, syscall.SIGSTOP)
			p.fault(fmt.Sprintf("pause %s (SIGSTOP) for %v", p.holderName(pr), cut), false)
			time.Sleep(cut)
			p.signal(pr, syscall.SIGCONT)
			p.fault(fmt.Sprintf("resume worker %d (SIGCONT)", pr.id), true)
			wait(ttl / 2)
		}
	case FaultBlackhole, FaultDelay:
		for n := 0; time.Now().Before(fits()); n++ {
			p.drain()
			s, pr := p.holder(ctx, fits())
			if pr == nil {
				break
			}
			wait(p.jitter(p.cfg.Work / 2))
			var desc string
			if p.cfg.Fault == FaultBlackhole {
				desc = fmt.Sprintf("blackhole worker %d from store and register for %v", pr.id, cut)
				p.each(s, func(px *faultproxy.Proxy) { px.Blackhole(faultproxy.Both) })
			} else {
				d := ttl / 3
				if n%2 == 1 {
					d = ttl * 6 / 10
				}
				desc = fmt.Sprintf("delay worker %d's traffic by %v±%v each way for %v", pr.id, d, ttl/10, cut)
				p.each(s, func(px *faultproxy.Proxy) { px.Delay(d, ttl/10) })
			}
			p.fault(desc, false)
			time.Sleep(cut)
			p.each(s, func(px *faultproxy.Proxy) { px.Heal() })
			p.fault(fmt.Sprintf("heal worker %d", pr.id), true)
			wait(ttl / 2)
		}
	case FaultKill:
		for time.Now().Before(fits()) {
			p.drain()
			s, pr := p.holder(ctx, fits())
			if pr == nil {
				break
			}
			wait(p.jitter(time.Duration(p.cfg.Writes) * p.cfg.Work))
			if p.cfg.Worker == WorkerFenceRun {
				p.killFenceRun(ctx, pr) // the holder is fence run; its worker goes on
				wait(ttl)
				continue
			}
			p.record(Event{W: pr.id, Op: OpKill})
			_ = pr.cmd.Process.Kill()
			p.fault(fmt.Sprintf("kill worker %d (SIGKILL)", pr.id), false)
			<-pr.done
			wait(ttl / 4)
			if err := p.spawn(s); err != nil {
				p.fault("respawn failed: "+err.Error(), true)
				return
			}
			p.fault(fmt.Sprintf("worker %d replaces worker %d", p.nextProcID()-1, pr.id), true)
			wait(ttl)
		}
	case FaultRestart:
		for time.Now().Before(fits()) {
			wait(ttl / 2)
			p.drain()
			began := time.Now()
			down := ttl * 3 / 2
			started := func(what string) { p.fault(what, false) }
			var desc string
			var err error
			if p.store.failover != nil {
				desc, err = p.store.failover(down, started, p.lossFault)
			} else {
				desc, err = p.store.restart(down, started)
			}
			if err != nil {
				p.fault("restart failed: "+err.Error(), true)
				p.faultErr = fmt.Errorf("restart: %w", err)
				return
			}
			p.fault(desc, true)
			if p.store.grantWithin > 0 {
				// The next episode waits for this one's grant (or its
				// bound): each is measured from a store that had
				// recovered, not from a leader killed again before the
				// clients reached it (checkGrants).
				p.holder(ctx, began.Add(p.store.grantWithin))
			}
			wait(ttl)
		}
	case FaultRestartEmpty:
		for time.Now().Before(fits()) {
			p.drain()
			if _, pr := p.holder(ctx, fits()); pr == nil {
				break
			}
			wait(p.jitter(p.cfg.Work))
			var desc string
			var err error
			if p.store.emptyMember != nil {
				desc, err = p.store.emptyMember(func(what string) { p.fault(what, false) })
			} else {
				desc, err = p.store.restartEmpty(func(what string) { p.lossFault(what) })
			}
			if err != nil {
				p.fault("restart failed: "+err.Error(), true)
				p.faultErr = fmt.Errorf("restart-empty: %w", err)
				return
			}
			p.fault(desc, true)
			wait(ttl)
		}
	case FaultWipe:
		for time.Now().Before(fits()) {
			p.drain()
			if _, pr := p.holder(ctx, fits()); pr == nil {
				break
			}
			wait(p.jitter(p.cfg.Work))
			p.fault("wipe the store's state", false)
			desc, err := p.store.wipe(ctx)
			if err != nil {
				p.fault("wipe failed: "+err.Error(), true)
				p.faultErr = fmt.Errorf("wipe: %w", err)
				return
			}
			// The state is gone once the wipe returned.
			p.record(Event{W: -1, Op: OpFault, Fault: desc, End: true, Loss: true})
			p.episodeEnded()
			wait(ttl)
		}
	case FaultClockJump:
		jump := 2 * ttl
		// A plan cut short between the two jumps leaves the clocks as it
		// found them.
		defer p.store.clock.reset()
		for time.Now().Before(fits()) {
			p.drain()
			if _, pr := p.holder(ctx, fits()); pr == nil {
				break
			}
			wait(p.jitter(p.cfg.Work))
			what, err := p.store.clock.forward(jump)
			if err != nil {
				p.fault("clock jump failed: "+err.Error(), true)
				p.faultErr = fmt.Errorf("clock-jump: %w", err)
				return
			}
			p.fault(fmt.Sprintf("%s jumps %v forward", what, jump), false)
			wait(ttl)
			if err := p.store.clock.back(jump); err != nil {
				p.fault("clock jump failed: "+err.Error(), true)
				p.faultErr = fmt.Errorf("clock-jump: %w", err)
				return
			}
			p.fault(fmt.Sprintf("%s jumps %v back", what, jump), true)
			wait(ttl)
		}
	case FaultPartition:
		for time.Now().Before(fits()) {
			p.drain()
			s, pr := p.holder(ctx, fits())
			if pr == nil {
				break
			}
			wait(p.jitter(p.cfg.Work))
			desc, member, heal, err := p.store.partition(p.lossFault)
			if err != nil {
				p.fault("partition failed: "+err.Error(), true)
				p.faultErr = fmt.Errorf("partition: %w", err)
				return
			}
			// The holder is left with the member cut off: its proxies to
			// the others hold every byte, so its client, which would
			// move to a member of the majority, is stranded with the
			// minority (the register stays in reach).
			for j, px := range s.proxies {
				if j != member {
					px.Blackhole(faultproxy.Both)
				}
			}
			began := time.Now()
			p.fault(fmt.Sprintf("%s, with worker %d's client, for %v", desc, pr.id, cut), false)
			time.Sleep(cut)
			for _, px := range s.proxies {
				px.Heal()
			}
			if err := heal(); err != nil {
				p.fault("heal failed: "+err.Error(), true)
				p.faultErr = fmt.Errorf("partition: heal: %w", err)
				return
			}
			p.fault("heal the partition", true)
			if p.store.grantWithin > 0 {
				// The plan ends no sooner than this episode's grant or
				// its bound: a plan whose clients were slow to start
				// would end before checkGrants could tell a store that
				// never granted from one that was not given the time.
				p.holder(ctx, began.Add(p.store.grantWithin))
			}
			wait(ttl)
		}
	}
}

var (
	errNoEpisode = errors.New("no fault episode has ended")
	errNoGrant   = errors.New("too few leases granted, or none after the last fault episode")
)

// proved says what the plan still lacks to prove anything: a fault
// episode that ended (unless it injects none), then a lease granted after
// the last one, and two grants in all.
func (p *plan) proved() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.cfg.Fault != FaultNone && p.ended == 0:
		return errNoEpisode
	case p.grants < 2 || p.lastGrant < p.lastEnd:
		return errNoGrant
	}
	return nil
}

// episodeEnded notes the end of a fault episode (see proved).
func (p *plan) episodeEnded() {
	p.mu.Lock()
	p.ended++
	p.lastEnd = Now()
	p.mu.Unlock()
}

// lossFault starts a fault episode at the moment the store lost its state:
// a lease granted before it may be granted again after it, while its
// holder still believes in it for up to a TTL (see crashOverlap).
func (p *plan) lossFault(desc string) {
	p.record(Event{W: -1, Op: OpFault, Fault: desc, Loss: true})
	fmt.Fprintf(p.cfg.Progress, "  %s %s: %s\n", p.store.Name, p.cfg.Fault, desc)
}

func (p *plan) nextProcID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nextID
}

func (p *plan) each(s *slot, f func(*faultproxy.Proxy)) {
	for _, px := range s.proxies {
		f(px)
	}
	f(s.regProxy)
}

func (p *plan) signal(pr *proc, sig syscall.Signal) {
	if p.cfg.Worker == WorkerFenceRun {
		p.signalFenceRun(pr, sig)
		return
	}
	p.mu.Lock()
	pr.stopped = sig == syscall.SIGSTOP
	p.mu.Unlock()
	_ = pr.cmd.Process.Signal(sig)
}

// workerStart bounds the start of a plan's workers. A k8s worker, whose
// client-go start is slow, once took more than 30 s on a loaded CI machine.
const workerStart = 60 * time.Second
