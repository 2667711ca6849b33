// Command fence-torture runs fence's leases under faults and checks that
// the fenced resource never takes a stale write.
//
// For each store and fault plan it starts worker processes (this program,
// re-executed) that loop: acquire a key (a lock, a semaphore slot, or a
// side of a reader-writer lock: --kind), make protected writes to a fenced
// register with the lease's token (a reader reads it instead), read it,
// release. Meanwhile it injects the fault: SIGSTOP of a holder past its
// TTL, a network blackhole or delay between a holder and the store
// (through a TCP fault proxy per worker), SIGKILL of a holder, a kill and
// restart of the store's server (with its data, or empty within the
// holder's validity), a wipe of the store's own state behind fence's
// back, or a step of the store server's wall clock. Every operation is
// recorded on the machine's monotonic clock and the history checked with
// porcupine against a fenced-register model, and directly (tokens only
// grow, no stale write accepted, no late grant reported held, no more
// holders at once than the kind admits beyond what the fault explains).
//
//	fence-torture [--store file,mem,redis,...|URL] [--fault all|pause,...]
//	              [--kind lock|semaphore|rw,...] [--limit 2]
//	              [--workers 3] [--writes 3] [--ttl 1s] [--duration 6s]
//	              [--no-guard] [--html DIR] [--json|--markdown]
//	              [--worker library|fence-run [--fence PATH]]
//
// See docs/reliability.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fencing/fence/cmd/internal/torture"
	"github.com/fencing/fence/internal/testkit/testserver"
)

const (
	exitOK     = 0
	exitFailed = 1 // a check failed (expected with --no-guard)
	exitUsage  = 2
)

func main() {
	if torture.IsWorker() {
		os.Exit(torture.WorkerMain())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(runMain(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	stores   []string
	faults   []torture.Fault
	kinds    []torture.LeaseKind
	cfg      torture.Config
	json     bool
	markdown bool
	verbose  bool
}

func parse(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("fence-torture", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, `usage: fence-torture [flags]

Runs fence leases under faults and checks the fenced register's history.

Stores (--store, comma-separated): a store URL of a running store, or a
name the tool sets up itself:
`)
		kinds := torture.Kinds()
		width := 0
		for _, k := range kinds {
			width = max(width, len(k[0]))
		}
		for _, k := range kinds {
			fmt.Fprintf(stderr, "  %-*s  %s\n", width, k[0], k[1])
		}
		fmt.Fprintf(stderr, `
Faults (--fault, comma-separated, or "all"): %s.

Exit status: 0 if every check passed, 1 if one failed (as it must with
--no-guard under the pause fault), 2 for a usage error.

Flags:
`, strings.Join(faultNames(), ", "))
		fs.PrintDefaults()
	}
	stores := fs.String("store", "file,mem", "stores to torture (comma-separated names or URLs)")
	faults := fs.String("fault", "all", "fault plans (comma-separated), or all")
	kinds := fs.String("kind", "lock", "what the workers acquire (comma-separated): lock, semaphore (of --limit slots) or rw (each lease a reader or a writer at random)")
	fs.IntVar(&o.cfg.Limit, "limit", 2, "a semaphore's slots")
	fs.IntVar(&o.cfg.Workers, "workers", 0, "worker processes (default 3, for a semaphore --limit + 2)")
	fs.IntVar(&o.cfg.Writes, "writes", 0, "protected writes per lease (default 3; under partition, enough to hold a lease for two TTLs)")
	fs.IntVar(&o.cfg.Keys, "keys", 1, "keys the workers contend for")
	fs.DurationVar(&o.cfg.TTL, "ttl", time.Second, "lease TTL; faults last about twice as long")
	fs.DurationVar(&o.cfg.Duration, "duration", 6*time.Second, "how long each plan runs")
	fs.DurationVar(&o.cfg.Work, "work", 30*time.Millisecond, "the slow step between a worker's lease check and each write")
	fs.BoolVar(&o.cfg.NoGuard, "no-guard", false, "writes bypass the fencing token check (shows what fencing prevents)")
	worker := fs.String("worker", "library", "what holds the leases: library (the worker, through the fence library) or fence-run (the fence command, with the writes made by the command it runs; locks only)")
	fs.StringVar(&o.cfg.Fence, "fence", "", "the fence binary the fence-run worker runs (default: build cmd/fence from this checkout, with go build)")
	fs.StringVar(&o.cfg.Register, "register", torture.RegisterPostgres,
		"the fenced register: postgres (a table guarded by fencepg's guard), postgres-guard-only (the same without the register's own row lock: only the guard orders writes) or memory (served by this process, guarded by a fence.MemoryGuard)")
	fs.StringVar(&o.cfg.RegisterDSN, "register-dsn", "", "PostgreSQL URL for the postgres register (default: start a private PostgreSQL)")
	fs.StringVar(&o.cfg.HTMLDir, "html", ".", "directory for porcupine's visualization of a failing history")
	fs.StringVar(&o.cfg.LogDir, "logs", "", "directory for the workers' logs (default: a new temporary directory)")
	fs.Uint64Var(&o.cfg.Seed, "seed", 0, "random seed (default: random)")
	fs.BoolVar(&o.json, "json", false, "print the results as JSON")
	fs.BoolVar(&o.markdown, "markdown", false, "print the results as docs/reliability.md's matrix (Markdown)")
	fs.BoolVar(&o.verbose, "v", false, "print each fault as it is injected")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	for _, s := range strings.Split(*stores, ",") {
		if s = strings.TrimSpace(s); s != "" {
			o.stores = append(o.stores, s)
		}
	}
	if *faults == "all" {
		o.faults = torture.Faults
	} else {
		for _, s := range strings.Split(*faults, ",") {
			f, err := torture.ParseFault(strings.TrimSpace(s))
			if err != nil {
				return nil, err
			}
			o.faults = append(o.faults, f)
		}
	}
	for _, s := range strings.Split(*kinds, ",") {
		k, err := torture.ParseLeaseKind(strings.TrimSpace(s))
		if err != nil {
			return nil, err
		}
		o.kinds = append(o.kinds, k)
	}
	wk, err := torture.ParseWorkerKind(*worker)
	if err != nil {
		return nil, err
	}
	o.cfg.Worker = wk
	switch {
	case o.cfg.Worker == torture.WorkerFenceRun && slices.ContainsFunc(o.kinds, func(k torture.LeaseKind) bool { return k != torture.KindLock }):
		return nil, errors.New("--worker fence-run takes locks only: fence run has no semaphores or reader-writer locks")
	case o.cfg.Fence != "" && o.cfg.Worker != torture.WorkerFenceRun:
		return nil, errors.New("--fence is for --worker fence-run")
	case o.cfg.Register != torture.RegisterMemory && o.cfg.Register != torture.RegisterPostgres && o.cfg.Register != torture.RegisterPostgresGuardOnly:
		return nil, fmt.Errorf("--register %q: want postgres, postgres-guard-only or memory", o.cfg.Register)
	case len(o.stores) == 0:
		return nil, errors.New("no store given")
	case o.json && o.markdown:
		return nil, errors.New("--json and --markdown: choose one")
	case o.cfg.Workers != 0 && o.cfg.Workers < 2:
		return nil, errors.New("--workers must be at least 2: one holder and one contender")
	case o.cfg.Limit < 1:
		return nil, errors.New("--limit must be at least 1")
	case slices.Contains(o.kinds, torture.KindSemaphore) && o.cfg.Workers != 0 && o.cfg.Workers <= o.cfg.Limit:
		return nil, fmt.Errorf("--workers must be more than --limit (%d): with a slot for every worker, nobody contends", o.cfg.Limit)
	case o.cfg.TTL < 50*time.Millisecond:
		return nil, errors.New("--ttl must be at least 50ms")
	case o.cfg.Duration < 3*o.cfg.TTL:
		return nil, fmt.Errorf("--duration must be at least three TTLs (%v) for a fault to fit", 3*o.cfg.TTL)
	}
	return o, nil
}

// planName names a store's plans of kind k in messages: the store alone
// for locks, as before there were other kinds.
func planName(store string, k torture.LeaseKind) string {
	if k == torture.KindLock {
		return store
	}
	return store + " " + string(k)
}

func faultNames() []string {
	var out []string
	for _, f := range torture.Faults {
		out = append(out, string(f))
	}
	return out
}

func runMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parse(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "fence-torture: %v\n", err)
		return exitUsage
	}
	if o.verbose {
		o.cfg.Progress = stderr
	}
	if o.cfg.LogDir == "" {
		if o.cfg.LogDir, err = os.MkdirTemp("", "fence-torture-"); err != nil {
			fmt.Fprintf(stderr, "fence-torture: %v\n", err)
			return exitFailed
		}
	}
	if o.cfg.Worker == torture.WorkerFenceRun && o.cfg.Fence == "" {
		dir, err := os.MkdirTemp("", "fence-torture-bin-")
		if err != nil {
			fmt.Fprintf(stderr, "fence-torture: %v\n", err)
			return exitFailed
		}
		defer os.RemoveAll(dir)
		fmt.Fprintf(stderr, "fence-torture: building fence for the fence-run worker ...\n")
		if o.cfg.Fence, err = torture.BuildFence(dir); err != nil {
			fmt.Fprintf(stderr, "fence-torture: %v (or give --fence PATH)\n", err)
			return exitFailed
		}
	}
	env := testserver.NewEnv("fence-torture", stderr)
	defer env.Close()
	if o.cfg.Register != torture.RegisterMemory && o.cfg.RegisterDSN == "" {
		if o.cfg.RegisterDSN, err = torture.StartRegisterDB(env); err != nil {
			fmt.Fprintf(stderr, "fence-torture: starting a PostgreSQL for the register (or use --register memory): %v\n", err)
			return exitFailed
		}
	}

	var results []*torture.Result
	failed := false
	for _, spec := range o.stores {
		if ctx.Err() != nil {
			break
		}
		s, err := torture.OpenStore(spec, env)
		if err != nil {
			fmt.Fprintf(stderr, "fence-torture: %v\n", err)
			failed = true
			continue
		}
		for _, k := range o.kinds {
			for _, f := range o.faults {
				if ctx.Err() != nil {
					break
				}
				cfg := o.cfg
				cfg.Fault, cfg.Kind = f, k
				fmt.Fprintf(stderr, "fence-torture: %s, fault %s, guard %v ...\n", planName(s.Name, k), f, !cfg.NoGuard)
				r, err := torture.Run(ctx, s, cfg)
				if err != nil {
					fmt.Fprintf(stderr, "fence-torture: %s %s: %v\n", planName(s.Name, k), f, err)
					failed = true
					continue
				}
				results = append(results, r)
				failed = failed || !r.OK()
			}
		}
		s.Close()
	}

	switch {
	case o.json:
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(results)
	case o.markdown:
		fmt.Fprint(stdout, torture.Markdown(results))
	default:
		fmt.Fprint(stdout, torture.Table(results))
		for _, r := range results {
			if r.OK() {
				continue
			}
			fmt.Fprintf(stdout, "\n%s, fault %s, guard %v:\n", planName(r.Store, r.Kind), r.Fault, r.Guard)
			for _, v := range r.Violations {
				fmt.Fprintf(stdout, "  - %s\n", v)
			}
			if r.HTML != "" {
				fmt.Fprintf(stdout, "  visualization: %s\n", r.HTML)
			}
		}
		fmt.Fprintf(stdout, "\nworker logs: %s\n", o.cfg.LogDir)
	}
	if failed || ctx.Err() != nil {
		return exitFailed
	}
	return exitOK
}
