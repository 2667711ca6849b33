package torture

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fencing/fence/cmd/internal/deathsig"
)

// The fence-run worker: the holder of each lease is the fence command,
// `fence run`, and the protected writes are made by the command it runs,
// with the token it passes in FENCE_TOKEN. It tests the path a shell
// script or a cron job takes: fence run's renewals, its loss detection,
// its stopping of the command, its exit status, and the kernel's
// parent-death signal that takes the command with a killed fence run.
//
// The worker process loops, as a library worker does, and runs for each
// lease
//
//	fence run --store URL --key K --ttl TTL --wait 4TTL --grace TTL/10 --json -- THIS-PROGRAM
//
// with this program in the command mode (commandEnv): it reads FENCE_KEY
// and FENCE_TOKEN, makes the writes and the read a library worker makes
// (without checking any lease: watching it is fence run's job) and writes
// its events on its standard output, which is fence run's, a pipe to the
// worker. The worker forwards them, and turns fence run's own --json
// events (on its standard error) into the acquisition, loss and release
// of the history, stamped at the time fence run wrote them (its wall
// clock, moved onto CLOCK_MONOTONIC), and adds an OpRun event with how
// fence run ended. checkFenceRun checks those.

// WorkerKind is what holds a plan's leases.
type WorkerKind string

// The worker kinds.
const (
	// WorkerLibrary: the worker process holds its leases through the
	// library (Client.Acquire), and writes itself.
	WorkerLibrary WorkerKind = "library"
	// WorkerFenceRun: `fence run` holds each lease, and the command it
	// runs writes (see the comment above). Locks only.
	WorkerFenceRun WorkerKind = "fence-run"
)

// WorkerKinds lists every worker kind.
var WorkerKinds = []WorkerKind{WorkerLibrary, WorkerFenceRun}

// ParseWorkerKind returns the worker kind named s.
func ParseWorkerKind(s string) (WorkerKind, error) {
	for _, k := range WorkerKinds {
		if string(k) == s {
			return k, nil
		}
	}
	return "", fmt.Errorf("unknown worker %q (known: library, fence-run)", s)
}

// Operations of the fence-run worker's events.
const (
	// OpStarted: fence run started its command; PIDs are fence run's and
	// the command's.
	OpStarted = "started"
	// OpRun: a fence run ended; Run says how.
	OpRun = "run"
	// OpKillRun: the parent killed a worker's fence run (SIGKILL); the
	// worker lives on.
	OpKillRun = "kill-run"
)

// RunEnd is how one fence run ended, in an OpRun event.
type RunEnd struct {
	Exit     int  `json:"exit"`               // fence run's exit status; 128+N if signal N killed it
	Acquired bool `json:"acquired,omitempty"` // it reported the key acquired
	// Command is the command's status as fence run's exited event gave
	// it; nil without one.
	Command *int `json:"command,omitempty"`
	// Died is Now() when the worker found fence run ended.
	Died int64 `json:"died"`
	// Stopped: the plan was ending and the worker sent fence run SIGTERM
	// (to end a wait).
	Stopped bool `json:"stopped,omitempty"`
}

// validUnknown is the Valid of an acquisition whose holder does not say
// how long its lease is valid for: fence run does not.
const validUnknown = -1

// commandEnv makes a process started by fence run the worker's command;
// its value is a commandConfig, as JSON. The worker's WorkerEnv is set
// too (inherited), with the register to write to.
const commandEnv = "FENCE_TORTURE_COMMAND"

type commandConfig struct {
	// FirstID is the first event id the command may use; it has
	// commandIDs of them.
	FirstID int64 `json:"first_id"`
}

// commandIDs is the block of event ids a command may use.
const commandIDs = 1 << 16

// exitLost is fence run's status for a lost lease (docs/cli.md).
const exitLost = 76

// runGrace is fence run's --grace: how long after SIGTERM to a command
// that outlives its lease fence run sends SIGKILL.
func runGrace(ttl time.Duration) time.Duration { return ttl / 10 }

// stopBound is how long a command may go on after fence run reported its
// lease lost, after fence run died, or after its fence run was killed:
// fence run's grace, and the lag of a loaded machine (overlapSlack).
func stopBound(ttl time.Duration) time.Duration { return runGrace(ttl) + overlapSlack(ttl) }

// fenceEvent is the part of fence run's --json events the worker reads
// (docs/cli.md).
type fenceEvent struct {
	Event    string `json:"event"`
	Time     string `json:"time"`
	Token    int64  `json:"token"`
	PID      int    `json:"pid"`
	ExitCode *int   `json:"exit_code"`
	Error    string `json:"error"`
	Message  string `json:"message"`
}

// fenceRunWorker is WorkerMain for a fence-run worker.
func fenceRunWorker(ctx context.Context, cfg workerConfig) int {
	if cfg.Fence == "" {
		fmt.Fprintf(os.Stderr, "torture worker %d: no fence binary\n", cfg.ID)
		return 2
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "torture worker %d: %v\n", cfg.ID, err)
		return 1
	}
	w := &worker{cfg: cfg, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(cfg.ID))), out: bufio.NewWriter(os.Stdout)}
	w.emit(Event{Op: OpReady})
	for ctx.Err() == nil {
		key := cfg.Keys[w.rng.IntN(len(cfg.Keys))]
		failed, err := w.fenceRun(ctx, self, key)
		if err != nil {
			fmt.Fprintf(os.Stderr, "torture worker %d: %v\n", cfg.ID, err)
			return 1
		}
		if failed {
			sleep(ctx, cfg.TTL/4) // the store may be down: do not spin
		}
		sleep(ctx, time.Duration(w.rng.Int64N(int64(cfg.Work)+1)))
	}
	return 0
}

// fenceRun runs one fence run on key and records it. It reports whether
// fence run failed to acquire for another reason than the end of its
// wait (the store failed). An error is the worker's own failure (fence
// run could not be started): the worker ends, and the plan with it.
func (w *worker) fenceRun(ctx context.Context, self, key string) (failed bool, err error) {
	ttl := w.cfg.TTL
	id := w.ids.Add(1)
	first := w.ids.Add(commandIDs) - commandIDs + 1
	cc, _ := json.Marshal(commandConfig{FirstID: first})
	cmd := exec.Command(w.cfg.Fence, "run", "--store", w.cfg.Store, "--key", key,
		"--ttl", ttl.String(), "--wait", (4 * ttl).String(), "--grace", runGrace(ttl).String(),
		"--json", "--", self)
	cmd.Env = append(os.Environ(), commandEnv+"="+string(cc))
	if raceBuild() {
		// fence and the command are built with the race detector, whose
		// runtime waits a second at exit by default (for late reports):
		// a second more of every lease, and of its command.
		cmd.Env = append(cmd.Env, "GORACE="+strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	}
	// Its standard input is /dev/null, not a terminal: fence run puts
	// the command in a process group of its own.
	outR, outW, err := os.Pipe() // the command's events: fence run gives it its standard output
	if err != nil {
		return false, err
	}
	errR, errW, err := os.Pipe() // fence run's events, and the command's standard error
	if err != nil {
		outR.Close()
		outW.Close()
		return false, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	// fence run dies with this worker, and its command with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}

	w.emit(Event{Op: OpAcquire, Ph: Call, ID: id, Key: key})
	exited, err := deathsig.Start(cmd)
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		w.emit(Event{Op: OpAcquire, Ph: Ret, ID: id, Key: key, Res: ResFail, Err: err.Error()})
		return false, fmt.Errorf("starting %s: %w", w.cfg.Fence, err)
	}
	fencePID := cmd.Process.Pid

	// The run's state, as fence run's events tell it.
	var (
		mu       sync.Mutex
		acquired bool
		token    int64
		released bool
		relID    int64 // the release's call was emitted
		command  *int
		lastErr  string
		stopped  bool
	)
	var readers sync.WaitGroup
	readers.Go(func() { w.forwardCommand(outR) })
	readers.Go(func() {
		sc := bufio.NewScanner(errR)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			fmt.Fprintf(os.Stderr, "%s\n", line) // the worker's log
			var fe fenceEvent
			if json.Unmarshal(line, &fe) != nil || fe.Event == "" {
				continue // the command's standard error
			}
			t := fenceTime(fe.Time)
			mu.Lock()
			switch fe.Event {
			case "acquired":
				acquired, token = true, fe.Token
				w.emit(Event{Op: OpAcquire, Ph: Ret, ID: id, T: t, Key: key, Token: token, Res: ResOK, Valid: validUnknown, PIDs: []int{fencePID}})
			case "started":
				w.emit(Event{Op: OpStarted, T: t, Key: key, Token: token, PIDs: []int{fencePID, fe.PID}})
			case "lost":
				w.emit(Event{Op: OpLost, T: t, Key: key, Token: token, Err: fe.Error})
			case "exited":
				command = fe.ExitCode
				if relID == 0 {
					// fence run releases the lease once its command
					// has ended: its belief ends here.
					relID = w.ids.Add(1)
					w.emit(Event{Op: OpRelease, Ph: Call, ID: relID, T: t, Key: key, Token: token})
				}
			case "released":
				released = true
			case "error", "release_failed", "held":
				lastErr = fe.Message
			}
			mu.Unlock()
		}
	})

	// The plan's end: a fence run still waiting for the key is told to
	// stop (SIGTERM ends its wait); one that holds it finishes its
	// command, as a library worker finishes its lease.
	select {
	case <-exited:
	case <-ctx.Done():
		mu.Lock()
		if !acquired {
			stopped = true
			_ = cmd.Process.Signal(syscall.SIGTERM)
		}
		mu.Unlock()
		<-exited
	}
	died := Now()
	// The command's events: to the end of its standard output, which a
	// command that outlived fence run still holds.
	readers.Wait()
	outR.Close()
	errR.Close()

	end := RunEnd{Exit: exitStatus(cmd.ProcessState), Died: died}
	mu.Lock()
	defer mu.Unlock()
	end.Acquired, end.Command, end.Stopped = acquired, command, stopped
	why := fmt.Sprintf("fence run exited %d", end.Exit)
	if lastErr != "" {
		why += ": " + lastErr
	}
	switch {
	case !acquired:
		err := why
		switch {
		case stopped:
			err += ": " + context.Canceled.Error() // the plan's end: a wait ended
		case end.Exit == 75:
			err += ": " + context.DeadlineExceeded.Error() // --wait ran out
		}
		w.emit(Event{Op: OpAcquire, Ph: Ret, ID: id, T: died, Key: key, Res: ResFail, Err: err})
		failed = !stopped && end.Exit != 75
	default:
		if relID == 0 { // killed before its command ended
			relID = w.ids.Add(1)
			w.emit(Event{Op: OpRelease, Ph: Call, ID: relID, T: died, Key: key, Token: token})
		}
		res := ResFail
		switch {
		case end.Exit == exitLost:
			res = ResLost
		case released:
			res = ResOK
		}
		w.emit(Event{Op: OpRelease, Ph: Ret, ID: relID, T: died, Key: key, Token: token, Res: res, Err: why})
	}
	w.emit(Event{Op: OpRun, Key: key, Token: token, Run: &end})
	return failed, nil
}

// forwardCommand passes the command's events on as the worker's own.
func (w *worker) forwardCommand(r *os.File) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil || e.T == 0 {
			fmt.Fprintf(os.Stderr, "command: %s\n", sc.Bytes())
			continue
		}
		w.emit(e)
	}
}

// fenceTime moves the time fence run stamped an event with (its wall
// clock) onto Now()'s clock; Now() itself if it cannot be read.
func fenceTime(s string) int64 {
	now := Now()
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return now
	}
	return now - int64(time.Since(t))
}

// exitStatus is a process's exit status, 128+N if signal N killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// commandMain is the command a fence-run worker's fence run runs: the
// writes of one lease, with FENCE_TOKEN, then a read. It checks no lease
// (it has none to check): stopping it when the lease is lost is fence
// run's job, and refusing its writes once it is the guard's.
func commandMain() int {
	var cfg workerConfig
	var cc commandConfig
	if err := json.Unmarshal([]byte(os.Getenv(WorkerEnv)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "torture command: bad %s: %v\n", WorkerEnv, err)
		return 2
	}
	if err := json.Unmarshal([]byte(os.Getenv(commandEnv)), &cc); err != nil {
		fmt.Fprintf(os.Stderr, "torture command: bad %s: %v\n", commandEnv, err)
		return 2
	}
	key := os.Getenv("FENCE_KEY")
	token, err := strconv.ParseInt(os.Getenv("FENCE_TOKEN"), 10, 64)
	if err != nil || token <= 0 || key == "" {
		fmt.Fprintf(os.Stderr, "torture command: FENCE_KEY %q, FENCE_TOKEN %q: want a key and a token > 0\n", key, os.Getenv("FENCE_TOKEN"))
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.TTL)
	reg, err := openRegister(ctx, cfg)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "torture command: %v\n", err)
		return 3
	}
	defer reg.Close()
	w := &worker{cfg: cfg, reg: reg, out: bufio.NewWriter(os.Stdout)}
	w.ids.Store(cc.FirstID - 1)
	// It writes on after a refused write, unlike a library worker: it
	// leaves stopping to fence run, so that a fence run that fails to
	// stop it shows.
	for i := range cfg.Writes {
		sleep(context.Background(), cfg.Work)
		w.write(key, token, fmt.Sprintf("w%d.%d.%d", cfg.ID, token, i))
	}
	w.read(key)
	return 0
}

// signalFenceRun is plan.signal for a fence-run worker: a pause stops
// the processes that hold the worker's lease, not the worker. Every
// other pause stops fence run alone, and leaves its command running (a
// stalled supervisor: the command writes on with a token that goes
// stale, and fence run must stop it once it runs again), and the others
// fence run and its command both (the machine stalls: both wake
// together). A pause of the command alone is not a fault of fencing:
// fence run renews on, and the lease stays valid.
func (p *plan) signalFenceRun(pr *proc, sig syscall.Signal) {
	p.mu.Lock()
	if sig == syscall.SIGSTOP {
		p.runPauses++
		pr.run.stopped = pr.run.pids
		if p.runPauses%2 == 1 && len(pr.run.pids) > 1 {
			pr.run.stopped = pr.run.pids[:1]
		}
	}
	pids := slices.Clone(pr.run.stopped)
	pr.stopped = sig == syscall.SIGSTOP
	p.mu.Unlock()
	if sig == syscall.SIGCONT {
		// The command first: woken together, either may run first, and
		// a command that runs first writes with its stale token before
		// fence run can stop it, which is what the guard is for.
		slices.Reverse(pids)
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
}

// holderName names what a pause stops, for its fault event.
func (p *plan) holderName(pr *proc) string {
	if p.cfg.Worker != WorkerFenceRun {
		return fmt.Sprintf("worker %d", pr.id)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch pids := pr.run.stopped; len(pids) {
	case 0:
		return fmt.Sprintf("worker %d's fence run (gone)", pr.id)
	case 1:
		return fmt.Sprintf("worker %d's fence run (pid %d) alone", pr.id, pids[0])
	default:
		return fmt.Sprintf("worker %d's fence run (pid %d) and its command (pid %d)", pr.id, pids[0], pids[1])
	}
}

// runProc is the parent's view of a fence-run worker's current fence run.
type runProc struct {
	pids    []int // fence run's, then its command's, while it holds a lease
	stopped []int // the pids the pause stopped
}

// noteRun follows a fence-run worker's events; p.mu held.
func (p *plan) noteRun(pr *proc, e Event) {
	switch {
	case len(e.PIDs) > 0:
		pr.run.pids = e.PIDs
	case e.Op == OpRun:
		pr.run.pids = nil
	}
}

// killFenceRun is the kill fault for a fence-run worker: it kills the
// holder, fence run, with SIGKILL; the kernel must take its command with
// it (the parent-death signal), and the worker goes on with its next
// lease.
func (p *plan) killFenceRun(ctx context.Context, pr *proc) {
	p.mu.Lock()
	var pid int
	if len(pr.run.pids) > 0 {
		pid = pr.run.pids[0]
	}
	p.mu.Unlock()
	if pid == 0 {
		return // its fence run ended meanwhile
	}
	p.record(Event{W: pr.id, Op: OpKillRun, PIDs: []int{pid}})
	_ = syscall.Kill(pid, syscall.SIGKILL)
	p.fault(fmt.Sprintf("kill worker %d's fence run (pid %d, SIGKILL)", pr.id, pid), false)
	sleep(ctx, p.cfg.TTL/4)
	p.fault(fmt.Sprintf("worker %d goes on", pr.id), true)
}

// checkFenceRun checks what only fence-run workers show (events sorted
// by time): that fence run ends as docs/cli.md says and stops its
// command when it must.
//
//   - A fence run that reported its lease lost exits 76, and one that
//     exits 76 reported the loss; one that did not lose its lease exits
//     with its command's status. One killed by the kill fault is exempt,
//     and one told to stop while it waited ends as it likes.
//   - Its command makes no write or read after fence run reported the
//     loss, after fence run died, or after fence run was killed, beyond
//     stopBound.
//   - A fence run that held a key while another worker was granted it
//     with a higher token (the store gave its lease away) reports the
//     loss: it exits 76.
func checkFenceRun(events []Event, ttl time.Duration) []string {
	type grant struct {
		w          int
		key        string
		token      int64
		from       int64
		end        int64 // the release's call (the command ended), or fence run's death
		lost, kill int64
		run        *RunEnd
	}
	var grants []grant
	var v []string
	add := func(s string) {
		if len(v) < 20 {
			v = append(v, s)
		}
	}
	bound := int64(stopBound(ttl))
	slack := int64(overlapSlack(ttl))
	byWorker := map[int][]Event{}
	for _, e := range events {
		if e.W >= 0 {
			byWorker[e.W] = append(byWorker[e.W], e)
		}
	}
	workers := make([]int, 0, len(byWorker))
	for w := range byWorker {
		workers = append(workers, w)
	}
	slices.Sort(workers)
	for _, w := range workers {
		var cur []Event // the events of one fence run, up to its OpRun
		for _, e := range byWorker[w] {
			cur = append(cur, e)
			if e.Op != OpRun || e.Run == nil {
				continue
			}
			g := grant{w: w, key: e.Key, token: e.Token, run: e.Run}
			var calls []Event // the command's
			for _, c := range cur {
				switch {
				case c.Op == OpAcquire && c.Ph == Ret && c.Res == ResOK:
					g.from = c.T
				case c.Op == OpRelease && c.Ph == Call && g.end == 0:
					g.end = c.T
				case c.Op == OpLost && g.lost == 0:
					g.lost = c.T
				case c.Op == OpKillRun:
					g.kill = c.T
				case c.Ph == Call && (c.Op == OpWrite || c.Op == OpRead):
					calls = append(calls, c)
				}
			}
			cur = nil
			r := e.Run
			name := fmt.Sprintf("worker %d's fence run on %q (token %d)", w, g.key, g.token)
			switch {
			case r.Exit == exitLost && g.lost == 0:
				add(fmt.Sprintf("%s exited %d without reporting a loss", name, r.Exit))
			case g.kill != 0, r.Stopped:
			case g.lost != 0 && r.Exit != exitLost:
				add(fmt.Sprintf("%s reported its lease lost but exited %d, not %d", name, r.Exit, exitLost))
			case r.Acquired && g.lost == 0 && r.Command == nil:
				add(fmt.Sprintf("%s exited %d with no exited event for its command", name, r.Exit))
			case r.Acquired && g.lost == 0 && r.Exit != *r.Command:
				add(fmt.Sprintf("%s exited %d where its command exited %d", name, r.Exit, *r.Command))
			case !r.Acquired && r.Exit == 0:
				add(fmt.Sprintf("worker %d's fence run on %q exited 0 without acquiring", w, g.key))
			}
			// The moment the command must be gone by.
			stop, why := r.Died, "after fence run ended"
			if g.lost != 0 && g.lost < stop {
				stop, why = g.lost, "after fence run reported the loss"
			}
			if g.kill != 0 && g.kill < stop {
				stop, why = g.kill, "after its fence run was killed"
			}
			late := 0
			for _, c := range calls {
				if c.T > stop+bound {
					if late == 0 {
						add(fmt.Sprintf("%s: its command began a %s %v %s (bound %v)", name, c.Op, time.Duration(c.T-stop), why, time.Duration(bound)))
					}
					late++
				}
			}
			if late > 1 {
				add(fmt.Sprintf("%s: ... %d operations of its command in all %s", name, late, why))
			}
			if r.Acquired {
				if g.end == 0 {
					g.end = r.Died
				}
				grants = append(grants, g)
			}
		}
	}
	// Every grant, of any worker, against every fence run that held the
	// key meanwhile.
	var all []Event
	for _, e := range events {
		if e.Op == OpAcquire && e.Ph == Ret && e.Res == ResOK {
			all = append(all, e)
		}
	}
	for _, g := range grants {
		if g.run.Exit == exitLost || g.kill != 0 || g.run.Stopped {
			continue
		}
		for _, b := range all {
			if b.W != g.w && b.Key == g.key && b.Token > g.token && b.T > g.from && b.T < g.end-slack {
				add(fmt.Sprintf("worker %d's fence run held %q (token %d) until %v after worker %d was granted it (token %d), and exited %d: a lost lease not reported",
					g.w, g.key, g.token, time.Duration(g.end-b.T), b.W, b.Token, g.run.Exit))
				break
			}
		}
	}
	return v
}

// BuildFence builds the fence command into dir for fence-run plans, and
// returns its path. It runs the go command on this checkout's
// github.com/fencing/fence/cmd/fence, so from within it (the repository
// or below), with one file added (go build -overlay) that registers the
// torture tool's own stores (the mem store's torturemem:// scheme).
// Under the race detector the binary is built with it too.
func BuildFence(dir string) (string, error) { return buildFence(dir, nil) }

// fencePatch replaces Old, found exactly once, with New in File of
// cmd/fence: a deliberately broken fence, for the tests that show the
// checks can fail. It goes into the build only (an overlay); the
// checkout is not touched.
type fencePatch struct {
	File, Old, New string
}

const fencePkg = "github.com/fencing/fence/cmd/fence"

func buildFence(dir string, patches []fencePatch) (string, error) {
	out, err := exec.Command("go", "list", "-f", "{{.Dir}}", fencePkg).Output()
	if err != nil {
		return "", fmt.Errorf("finding %s (run from the fence checkout): %w%s", fencePkg, err, exitStderr(err))
	}
	src := strings.TrimSpace(string(out))
	replace := map[string]string{}
	extra := filepath.Join(dir, "torture_stores.go")
	err = os.WriteFile(extra, []byte("package main\n\n// The torture tool's own stores (torturemem://), for its fence-run workers.\nimport _ \"github.com/fencing/fence/cmd/internal/torture\"\n"), 0o644)
	if err != nil {
		return "", err
	}
	replace[filepath.Join(src, "zz_torture_stores.go")] = extra
	patched := map[string]string{} // file -> its text, patched so far
	for _, pt := range patches {
		text, ok := patched[pt.File]
		if !ok {
			orig, err := os.ReadFile(filepath.Join(src, pt.File))
			if err != nil {
				return "", err
			}
			text = string(orig)
		}
		if n := strings.Count(text, pt.Old); n != 1 {
			return "", fmt.Errorf("breaking cmd/fence/%s: the text to replace occurs %d times, not once (has the file changed?): %q", pt.File, n, pt.Old)
		}
		patched[pt.File] = strings.Replace(text, pt.Old, pt.New, 1)
	}
	for file, text := range patched {
		broken := filepath.Join(dir, "patched-"+file)
		if err := os.WriteFile(broken, []byte(text), 0o644); err != nil {
			return "", err
		}
		replace[filepath.Join(src, file)] = broken
	}
	ov, _ := json.Marshal(map[string]any{"Replace": replace})
	ovPath := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(ovPath, ov, 0o644); err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "fence")
	args := []string{"build", "-overlay", ovPath, "-o", bin}
	if raceBuild() {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, fencePkg)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", fencePkg, err, out)
	}
	return bin, nil
}

// raceBuild reports whether this program was built with the race
// detector.
func raceBuild() bool {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return false
	}
	for _, s := range bi.Settings {
		if s.Key == "-race" {
			return s.Value == "true"
		}
	}
	return false
}

func exitStderr(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}
