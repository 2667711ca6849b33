// Command fence-bench measures fence side by side with the Go lock
// libraries for the same stores and with each store's raw protocol, on
// private servers it starts, and writes docs/performance.md.
//
// Run it from bench/:
//
//	go run ./cmd/fence-bench                 # the full run (a few minutes), writes ../docs/performance.md
//	go run ./cmd/fence-bench -quick -out -   # a quick look, to stdout
//	go run ./cmd/fence-bench -stores redis -rounds 3
//	go run ./cmd/fence-bench -stores redis,postgres -held 1,100 -hold-for 3s -out /tmp/p.md
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencing/fence/bench"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "fence-bench:", err)
		os.Exit(1)
	}
}

func run() error {
	def := bench.DefaultConfig()
	defScale := bench.DefaultScaleConfig()
	var (
		quick    = flag.Bool("quick", false, "a quick run (few rounds, few operations): figures too few to quote")
		rounds   = flag.Int("rounds", 0, fmt.Sprintf("interleaved rounds per measurement (default %d, quick %d)", def.Rounds, bench.QuickConfig().Rounds))
		ops      = flag.Int("ops", 0, fmt.Sprintf("uncontended acquire + release pairs per client per round (default %d)", def.Ops))
		handoffs = flag.Int("handoffs", 0, fmt.Sprintf("timed handoffs per contender per round (default %d)", def.Handoffs))
		waiters  = flag.String("waiters", "", "comma-separated numbers of waiters for the handoff (default 1,8,32,128)")
		hold     = flag.Duration("hold", 0, fmt.Sprintf("how long a holder keeps the lock once all others wait (default %v)", def.Hold))
		stores   = flag.String("stores", strings.Join(bench.Stores, ","), "comma-separated stores to measure")
		out      = flag.String("out", "../docs/performance.md", "where to write the report; - for stdout")
		cpuprof  = flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file; the uncontended turns' samples carry the labels contender (store/name) and turn (go tool pprof -tagfocus contender=redis/fence)")
		quiet    = flag.Bool("q", false, "no progress on stderr")
		only     = flag.String("only", "", "measure only the contenders whose store/name matches this regular expression (for a closer look; the report's ratios need fence and the others)")
		scale    = flag.Bool("scale", true, "measure the scale section too: N leases held, many clients over many keys")
		held     = flag.String("held", "", "comma-separated numbers of leases held at once in the scale section (default 1,100,1000,10000)")
		heldTTL  = flag.Duration("held-ttl", 0, fmt.Sprintf("TTL of the held leases (default %v)", defScale.TTL))
		holdFor  = flag.Duration("hold-for", 0, fmt.Sprintf("how long the held leases are measured (default %v)", defScale.HoldFor))
		charts   = flag.String("charts", "", "directory of the SVG charts (default: performance/ beside -out; none with -out -)")
	)
	flag.Parse()
	cfg := def
	if *quick {
		cfg = bench.QuickConfig()
	}
	if *rounds > 0 {
		cfg.Rounds = *rounds
	}
	if *ops > 0 {
		cfg.Ops = *ops
	}
	if *handoffs > 0 {
		cfg.Handoffs = *handoffs
	}
	if *hold > 0 {
		cfg.Hold = *hold
	}
	if *waiters != "" {
		ns, err := parseInts(*waiters)
		if err != nil {
			return fmt.Errorf("bad -waiters %q", *waiters)
		}
		cfg.Waiters = ns
	}
	scfg := defScale
	if *quick {
		scfg = bench.QuickScaleConfig()
	}
	if *held != "" {
		ns, err := parseInts(*held)
		if err != nil {
			return fmt.Errorf("bad -held %q", *held)
		}
		scfg.Held = ns
	}
	if *heldTTL > 0 {
		scfg.TTL = *heldTTL
	}
	if *holdFor > 0 {
		scfg.HoldFor = *holdFor
	}
	ss, err := bench.ParseStores(*stores)
	if err != nil {
		return err
	}
	var log io.Writer = os.Stderr
	if *quiet {
		log = nil
	}
	cfg.Log = log
	scfg.Log = log

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	env := testserver.NewEnv("fence-bench", log)
	defer env.Close()
	var srv *bench.Servers
	if err := env.Do(func(tb testing.TB) { srv = bench.StartServers(tb, ss) }); err != nil {
		if errors.Is(err, testserver.ErrUnavailable) {
			return fmt.Errorf("%w (choose others with -stores)", err)
		}
		return err
	}

	defer srv.Close()

	if *cpuprof != "" {
		f, err := os.Create(*cpuprof)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	start := time.Now()
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			return fmt.Errorf("bad -only: %w", err)
		}
		cfg.Only = re.MatchString
	}
	rep, err := bench.Measure(ctx, srv, ss, cfg)
	if err != nil {
		return err
	}
	if *scale {
		scaleStart := time.Now()
		if rep.Scale, err = bench.MeasureScale(ctx, srv, ss, scfg); err != nil {
			return err
		}
		rep.Took = time.Since(start)
		if log != nil {
			fmt.Fprintf(log, "scale section measured in %v\n", time.Since(scaleStart).Round(time.Second))
		}
	}
	rep.Command = command()
	if log != nil {
		fmt.Fprintf(log, "measured in %v\n", time.Since(start).Round(time.Second))
	}
	dir, link := *charts, *charts
	if dir == "" && *out != "-" {
		dir, link = filepath.Join(filepath.Dir(*out), "performance"), "performance"
	} else if dir != "" && *out != "-" {
		if l, err := filepath.Rel(filepath.Dir(*out), dir); err == nil {
			link = l
		}
	}
	if dir != "" {
		if err := rep.WriteCharts(dir, link); err != nil {
			return err
		}
	}
	if *out == "-" {
		return rep.WriteMarkdown(os.Stdout)
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	if err := rep.WriteMarkdown(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if log != nil {
		fmt.Fprintf(log, "wrote %s\n", *out)
	}
	return nil
}

// parseInts parses a comma-separated list of positive numbers.
func parseInts(list string) ([]int, error) {
	var out []int
	for w := range strings.SplitSeq(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(w))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad number %q", w)
		}
		out = append(out, n)
	}
	return out, nil
}

// command is the command line that reproduces this run, from bench/.
func command() string {
	args := []string{"go", "run", "./cmd/fence-bench"}
	for _, a := range os.Args[1:] {
		if strings.ContainsAny(a, " \t'\"$") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		args = append(args, a)
	}
	return strings.Join(args, " ")
}
