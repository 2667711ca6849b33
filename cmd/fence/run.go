package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/cmd/internal/deathsig"
	"golang.org/x/sys/unix"
)

// forwarded are the signals "fence run" passes on to CMD. INT, TERM, HUP
// and QUIT also end a wait for the key, and a --hold-at-least hold.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

func stops(s os.Signal) bool {
	return s == syscall.SIGINT || s == syscall.SIGTERM || s == syscall.SIGHUP || s == syscall.SIGQUIT
}

func sigName(s os.Signal) string {
	if n, ok := s.(syscall.Signal); ok {
		if name := unix.SignalName(n); name != "" {
			return name
		}
	}
	return s.String()
}

func sigExit(s os.Signal) int {
	if n, ok := s.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return exitError
}

type runFlags struct {
	store, key      string
	keys            []string      // --keys, sorted; see runkeys.go
	lockDelay       time.Duration // --lock-delay
	ttl, wait, hold time.Duration
	grace           time.Duration
	noWait, json    bool
	ttlSet          bool // --ttl was given
	metricsAddr     string
	argv            []string
	resume          resumeFlags // --resume
}

const runSynopsis = "fence run [--store URL] (--key K | --keys K1,K2,...) [--ttl 60s] [--lock-delay D] [--wait D | --no-wait | --resume] [--hold-at-least D] [--grace 10s] [--metrics-addr HOST:PORT] [--json] -- CMD ARGS..."

// parseRun parses the command line of "fence run". After -h it returns
// flag.ErrHelp, the usage printed on stdout; after a mistake, the error
// to report. jsonOut says whether the command line asks for --json, even
// when it has a mistake.
func parseRun(args []string, stdout io.Writer) (f runFlags, jsonOut bool, err error) {
	fs, store, jsonFlag := newFlags("run")
	fs.StringVar(&f.key, "key", "", "the lock's key (required, unless --keys)")
	keysFlag(fs, &f.keys)
	durationFlag(fs, &f.lockDelay, "lock-delay", 0, "if the lease is lost without a release, keep the key from everyone for this `duration` after")
	durationFlag(fs, &f.ttl, "ttl", 60*time.Second, "lease TTL (a `duration`); fence renews the lease every TTL/3 while CMD runs")
	durationFlag(fs, &f.wait, "wait", 0, "wait at most this `duration` for a held key, then exit 75 (default: wait until it is free)")
	fs.BoolVar(&f.noWait, "no-wait", false, "if the key is held, exit 75 at once instead of waiting")
	durationFlag(fs, &f.hold, "hold-at-least", 0, "keep the key after CMD ends until this `duration` after it was acquired")
	durationFlag(fs, &f.grace, "grace", 10*time.Second, "when the lease is lost, `duration` between SIGTERM and SIGKILL to CMD")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://`HOST:PORT`/metrics while fence runs")
	fs.BoolVar(&f.resume.on, "resume", false, "take back the lease named by FENCE_OWNER and FENCE_TOKEN, keeping its token; never waits")
	jsonOut = wantsJSON(fs, args)
	if err := parseFlags(fs, runSynopsis, args, stdout); err != nil {
		return f, jsonOut, err
	}
	f.store, f.json, f.argv = *store, *jsonFlag, fs.Args()
	waitSet := false
	fs.Visit(func(fl *flag.Flag) { waitSet, f.ttlSet = waitSet || fl.Name == "wait", f.ttlSet || fl.Name == "ttl" })
	switch {
	case f.key == "" && f.keys == nil:
		err = usagef("run: --key is required; usage: %s", runSynopsis)
	case f.key != "" && f.keys != nil:
		err = usagef("run: --key and --keys exclude each other: --keys takes every key it lists, all or none")
	case len(f.argv) == 0:
		err = usagef("run: no command given; usage: fence run --key K -- CMD ARGS...")
	case f.noWait && waitSet:
		err = usagef("run: --wait and --no-wait exclude each other: --wait D waits at most D, --no-wait not at all")
	case f.ttl <= 0:
		err = usagef("run: --ttl %v must be positive, e.g. --ttl 30s", f.ttl)
	case f.wait < 0, f.hold < 0, f.grace < 0, f.lockDelay < 0:
		err = usagef("run: --wait, --hold-at-least, --grace and --lock-delay must not be negative")
	case f.metricsAddr != "":
		if _, _, serr := net.SplitHostPort(f.metricsAddr); serr != nil {
			err = usagef("run: --metrics-addr %q: want HOST:PORT, e.g. 127.0.0.1:9464 (port 0 picks a free one)", f.metricsAddr)
		}
	}
	if err == nil && f.keys == nil {
		err = fence.ValidateKey(f.key)
	}
	if err == nil && f.resume.on && f.keys != nil {
		err = usagef("run: --resume takes back one lease, of --key; it cannot be given with --keys")
	}
	if err == nil && f.resume.on {
		err = f.resume.read(f.key, f.noWait || waitSet)
		f.noWait = true // a resume makes one attempt
	}
	return f, f.json, err
}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	f, jsonOut, err := parseRun(args, stdout)
	ev := &events{w: stderr, json: jsonOut, key: keyOfEvents(f)}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
		return ev.fail(err)
	}

	// From here on, signals are ours to handle: they end a wait, or go to
	// CMD.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)
	defer signal.Stop(sigs)

	ctx := context.Background()
	opts := []fence.ClientOption{fence.WithLogger(slog.New(&logHandler{ev: ev}))}
	if f.metricsAddr != "" {
		m, err := serveMetrics(f.metricsAddr)
		if err != nil {
			return ev.fail(err)
		}
		defer m.Close()
		opts = append(opts, fence.WithObserver(m.observer))
		// Announced on a terminal-less text run only if the port was
		// picked for us: the user cannot know it otherwise.
		ev.emit(event{Event: "metrics", Addr: m.url, Message: "serving metrics at " + m.url}, m.picked)
	}
	st, err := openStore(ctx, f.store, opts...)
	if err != nil {
		return ev.fail(err)
	}
	defer st.Close()
	st.warn(ev)
	if err := fitTTL(st, &f, ev); err != nil {
		return ev.fail(err)
	}
	leaseOpts := []fence.AcquireOption{fence.WithTTL(f.ttl), fence.WithLockDelay(f.lockDelay)}
	if f.keys != nil {
		return runKeys(ctx, st, f, leaseOpts, ev, sigs)
	}
	if f.resume.on {
		leaseOpts = append(leaseOpts, fence.WithResume(f.resume.owner, f.resume.token))
	}

	tctx, cancel := context.WithTimeout(ctx, storeTimeout)
	l, err := st.client.TryAcquire(tctx, f.key, leaseOpts...)
	cancel()
	err = st.wrap(err)
	if waitsOn(err, f) {
		var sig os.Signal
		l, err, sig = waitFor(ctx, st, f, leaseOpts, err, ev, sigs)
		if sig != nil {
			return interruptedWaiting(ev, sig, f.key)
		}
	}
	if err != nil {
		var held *fence.HeldError
		if errors.As(err, &held) {
			reportHeld(ctx, st, held, f, ev)
			return exitHeld
		}
		if f.resume.on && errors.Is(err, fence.ErrNotHeld) {
			return f.resume.gone(f.key, ev)
		}
		return ev.fail(err)
	}
	ev.emit(event{Event: "acquired", Store: st.url, Token: l.Token(), Owner: l.Owner(),
		Message: fmt.Sprintf("acquired %q with token %d", f.key, l.Token())}, false)
	return runHeld(l, f, ev, sigs)
}

// waitsOn reports whether run waits after a first try that failed with
// err: for a held key; for a store that answered that it cannot grant
// for now (fence.ErrUnavailable: a failover, an election, a full pool),
// which the Client waits through; and for a grant whose reply came back
// after the lease's validity had ended (fence.ErrLost before run held
// anything: a store that answers slowly, as a cluster electing a
// leader), which a waiting Acquire tries again. Not with --no-wait. A
// store that cannot be opened at all fails at once: fence cannot tell
// one that is down for a moment from a wrong address.
func waitsOn(err error, f runFlags) bool {
	return !f.noWait && (errors.Is(err, fence.ErrHeld) || errors.Is(err, fence.ErrUnavailable) || errors.Is(err, fence.ErrLost))
}

func reportHeld(ctx context.Context, st *store, held *fence.HeldError, f runFlags, ev *events) {
	h := held.Holder
	if h == nil {
		ictx, cancel := context.WithTimeout(ctx, storeTimeout)
		if got, err := st.client.Inspect(ictx, held.Key); err == nil {
			h = &got
		}
		cancel()
	}
	e := event{Event: "held"}
	why := "is held"
	if f.wait > 0 && !f.noWait {
		why = fmt.Sprintf("is still held after waiting %v", f.wait)
	}
	if h != nil {
		j := toJSON(*h, time.Now())
		e.Holder = &j
		e.Message = fmt.Sprintf("key %q %s by %s; not running the command", held.Key, why, describe(*h, time.Now()))
	} else {
		e.Message = fmt.Sprintf("key %q %s; not running the command", held.Key, why)
	}
	ev.emit(e, true)
}

// runHeld runs CMD under the held lease l (or leases, see holding) and
// returns fence's exit status.
func runHeld(l holding, f runFlags, ev *events, sigs <-chan os.Signal) int {
	cmd := exec.Command(f.argv[0], f.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), childEnv(l)...)
	// CMD gets its own process group, so that a lost lease stops all of
	// it, not just its first process; except on a terminal, where it must
	// stay in the foreground group to read the terminal and to get Ctrl-C.
	ownGroup := !isTerminal(os.Stdin)
	cmd.SysProcAttr = sysProcAttr(ownGroup)

	// CMD dies with fence run (see sysProcAttr).
	exited, err := deathsig.Start(cmd)
	if err != nil {
		_ = release(l, ev) // a loss harms nothing here: CMD never ran
		msg := fmt.Sprintf("cannot run %s: %v", f.argv[0], err)
		ev.emit(event{Event: "error", Error: err.Error(), Message: msg}, true)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
			return exitNotFound
		}
		return exitNoExec
	}
	pid := cmd.Process.Pid
	ev.emit(event{Event: "started", PID: pid, Token: l.Token(), Tokens: tokensOf(l),
		Message: fmt.Sprintf("started %s (pid %d) with %s", f.argv[0], pid, describeTokens(l))}, false)
	signalCmd := func(s syscall.Signal) {
		if ownGroup {
			_ = syscall.Kill(-pid, s)
		} else {
			_ = syscall.Kill(pid, s)
		}
	}

	var (
		lost      error
		leaseDone = l.Done()
		kill      <-chan time.Time
	)
	for {
		select {
		case <-exited:
			code := exitCode(cmd.ProcessState)
			e := event{Event: "exited", PID: pid, ExitCode: intp(code),
				Message: fmt.Sprintf("%s (pid %d) exited with status %d", f.argv[0], pid, code)}
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				e.Signal = sigName(ws.Signal())
			}
			ev.emit(e, false)
			if lost != nil {
				if ownGroup {
					signalCmd(syscall.SIGKILL) // whatever CMD left behind in its group
				}
				_ = l.Release(context.Background())
				return exitLost
			}
			// The lease may be lost still: found during --hold-at-least,
			// or only now, by the release. The work CMD did may then have
			// overlapped another holder's, whatever CMD's own status.
			during := "when releasing it"
			if holdAtLeast(l, f, ev, sigs) {
				during = "during --hold-at-least"
			}
			if err := release(l, ev); errors.Is(err, fence.ErrLost) {
				reportLostAfter(l, f, pid, code, during, err, ev)
				return exitLost
			}
			return code
		case s := <-sigs:
			if !ownGroup && s == syscall.SIGINT {
				// On a terminal CMD shares our process group: it got
				// Ctrl-C from the terminal itself.
				continue
			}
			ev.emit(event{Event: "signal", Signal: sigName(s), PID: pid,
				Message: fmt.Sprintf("forwarding %s to %s (pid %d)", sigName(s), f.argv[0], pid)}, false)
			signalCmd(s.(syscall.Signal))
		case <-leaseDone:
			leaseDone = nil
			lost = l.Err()
			if !errors.Is(lost, fence.ErrLost) {
				lost = nil // released: only we release, after CMD ends
				continue
			}
			e := event{Event: "lost", Token: l.Token(), PID: pid, Error: lost.Error(),
				Message: fmt.Sprintf("%v; sending SIGTERM to %s (pid %d), SIGKILL in %v",
					trimFence(lost.Error()), f.argv[0], pid, f.grace)}
			var le *fence.LostError
			if errors.As(lost, &le) {
				e.Reason = string(le.Reason)
			}
			ev.emit(e, true)
			signalCmd(syscall.SIGTERM)
			kill = time.After(f.grace)
		case <-kill:
			kill = nil
			ev.emit(event{Event: "kill", PID: pid, Signal: "SIGKILL",
				Message: fmt.Sprintf("%s (pid %d) still running %v after SIGTERM; sending SIGKILL", f.argv[0], pid, f.grace)}, true)
			signalCmd(syscall.SIGKILL)
		}
	}
}

// holdAtLeast keeps the lease until --hold-at-least has passed since it
// was acquired, unless it is lost or a stopping signal comes first. It
// reports whether the lease was lost meanwhile.
func holdAtLeast(l holding, f runFlags, ev *events, sigs <-chan os.Signal) (lost bool) {
	d := time.Until(l.AcquiredAt().Add(f.hold))
	if d <= 0 {
		return false
	}
	ev.emit(event{Event: "holding", Token: l.Token(),
		Message: fmt.Sprintf("holding %q for %s more (--hold-at-least %v)", l.Key(), roundDur(d), f.hold)}, false)
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return false
		case <-l.Done():
			return errors.Is(l.Err(), fence.ErrLost)
		case s := <-sigs:
			if stops(s) {
				return false
			}
		}
	}
}

// release releases l and says so; it returns the error of the release,
// which matches fence.ErrLost if the lease turned out to be lost (the
// caller reports that).
func release(l holding, ev *events) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := l.Release(ctx)
	switch {
	case err == nil:
		ev.emit(event{Event: "released", Token: l.Token(), Message: fmt.Sprintf("released %q", l.Key())}, false)
	case !errors.Is(err, fence.ErrLost):
		ev.emit(event{Event: "release_failed", Token: l.Token(), Error: err.Error(),
			Message: "release: " + trimFence(err.Error())}, true)
	}
	return err
}

// reportLostAfter reports a lease found lost after CMD ended, with status
// code: during --hold-at-least, or by the release.
func reportLostAfter(l holding, f runFlags, pid, code int, during string, err error, ev *events) {
	e := event{Event: "lost", Token: l.Token(), PID: pid, Error: err.Error(),
		Message: fmt.Sprintf("%v; found %s, after %s (pid %d) exited with status %d: its work may have overlapped another holder's",
			trimFence(err.Error()), during, f.argv[0], pid, code)}
	var le *fence.LostError
	if errors.As(err, &le) {
		e.Reason = string(le.Reason)
	}
	ev.emit(e, true)
}

// exitCode returns CMD's exit status, or 128+N if signal N killed it.
func exitCode(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func trimFence(s string) string {
	if len(s) > 7 && s[:7] == "fence: " {
		return s[7:]
	}
	return s
}

// interruptedWaiting reports a signal that ended the wait for what (a key,
// or the keys of --keys) before CMD ran, and returns the exit status the
// signal calls for.
func interruptedWaiting(ev *events, sig os.Signal, what any) int {
	ev.emit(event{Event: "interrupted", Signal: sigName(sig),
		Message: fmt.Sprintf("%s while waiting for %q; not running the command", sigName(sig), what)}, true)
	return sigExit(sig)
}
