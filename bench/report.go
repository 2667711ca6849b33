package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"
)

// Machine describes where the figures were measured.
type Machine struct {
	CPUs     int
	CPUModel string
	Kernel   string
	Go       string
	// Servers are the servers' versions, by store.
	Servers map[string]string
}

// ThisMachine describes the machine this runs on.
func ThisMachine(servers map[string]string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), CPUModel: "unknown", Kernel: "unknown",
		Go: runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH, Servers: servers}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	return m
}

// Report is one run, ready to print.
type Report struct {
	Command  string
	Date     time.Time
	Took     time.Duration
	Machine  Machine
	Config   Config
	Stores   []string
	Results  []*Result
	Analysis string // markdown appended at the end; see Analysis
	// Scale, if not nil, is the scale section's measurement.
	Scale *Scale
	// Charts are the SVG files WriteCharts wrote, linked from the report.
	Charts []Chart
}

func (rep *Report) result(store, name string) *Result {
	for _, r := range rep.Results {
		if r.Contender.Store == store && r.Contender.Name == name {
			return r
		}
	}
	return nil
}

func (rep *Report) store(store string) []*Result {
	var out []*Result
	for _, r := range rep.Results {
		if r.Contender.Store == store {
			out = append(out, r)
		}
	}
	return out
}

// Row is one line of a store's table: a figure for each contender.
type Row struct {
	Label string
	// Values are by contender name; NaN-free, 0 where not measured.
	Values map[string]float64
	// Ratios are fence ÷ other, in the order of Comparisons(store).
	Ratios []float64
}

const serverTimeLabel = "server time per acquire + release (µs)"

var storeTitles = map[string]string{"redis": "Redis", "postgres": "PostgreSQL", "etcd": "etcd", "sqlite": "SQLite", "aztable": "Azure Table storage (Azurite)", "dynamodb": "DynamoDB (dynalite)"}

// Rows returns the figures of one store's table.
func (rep *Report) Rows(store string) []Row {
	rs := rep.store(store)
	type figure struct {
		label string
		get   func(*Result) float64
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	p := rep.Config.Parallel
	figs := []figure{
		{"round trips per acquire + release", func(r *Result) float64 { return r.RoundTrips }},
		{serverTimeLabel, func(r *Result) float64 { return float64(r.ServerTime) / float64(time.Microsecond) }},
		{"client CPU per acquire + release (µs)", func(r *Result) float64 { return float64(r.ClientCPU) / float64(time.Microsecond) }},
		{"1 client: p50 (ms)", func(r *Result) float64 { return ms(r.Serial.P50) }},
		{"1 client: p99 (ms)", func(r *Result) float64 { return ms(r.Serial.P99) }},
		{"1 client: pairs/s", func(r *Result) float64 { return r.SerialRate }},
		{fmt.Sprintf("%d clients: p50 (ms)", p), func(r *Result) float64 { return ms(r.Parallel.P50) }},
		{fmt.Sprintf("%d clients: p99 (ms)", p), func(r *Result) float64 { return ms(r.Parallel.P99) }},
		{fmt.Sprintf("%d clients: pairs/s", p), func(r *Result) float64 { return r.ParallelRate }},
		{"allocs per acquire + release", func(r *Result) float64 { return r.Allocs }},
		{"bytes per acquire + release", func(r *Result) float64 { return r.Bytes }},
	}
	for _, w := range rep.Config.Waiters {
		figs = append(figs,
			figure{"handoff, " + waitersText(w) + ": p50 (ms)", func(r *Result) float64 { return ms(r.Handoff[w].P50) }},
			figure{"handoff, " + waitersText(w) + ": p99 (ms)", func(r *Result) float64 { return ms(r.Handoff[w].P99) }},
		)
	}
	var rows []Row
	for _, f := range figs {
		if f.label == serverTimeLabel && !slices.ContainsFunc(rs, func(r *Result) bool { return r.ServerTime > 0 }) {
			continue // the store does not tell
		}
		row := Row{Label: f.label, Values: map[string]float64{}}
		for _, r := range rs {
			row.Values[r.Contender.Name] = f.get(r)
		}
		for _, c := range Comparisons(store) {
			a, b := row.Values[c.Fence], row.Values[c.Other]
			ratio := 0.0
			if b > 0 {
				ratio = a / b
			}
			row.Ratios = append(row.Ratios, ratio)
		}
		rows = append(rows, row)
	}
	return rows
}

func num(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 1:
		return fmt.Sprintf("%.3f", v)
	case v < 10:
		return fmt.Sprintf("%.2f", v)
	case v < 100:
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func ratio(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f", v)
}

// rawOf names, for each fence contender (store/name), its raw floor.
var rawOf = map[string]string{
	"redis/fence": "raw", "postgres/fence-lease": "raw-lease",
	"postgres/fence-session": "raw-advisory", "etcd/fence": "raw",
}

// Target is one of the goals of issue 8, judged on the figures.
type Target struct {
	Goal, Store, Measured string
	Met                   bool
}

// Targets judges the targets on the figures.
func (rep *Report) Targets() []Target {
	var ts []Target
	ms := func(d time.Duration) string { return num(float64(d)/float64(time.Millisecond)) + " ms" }
	add := func(goal, store string, met bool, format string, args ...any) {
		ts = append(ts, Target{Goal: goal, Store: store, Measured: fmt.Sprintf(format, args...), Met: met})
	}
	type pair struct{ store, fence, other string }
	floors := []pair{{"redis", "fence", "raw"}, {"postgres", "fence-lease", "raw-lease"},
		{"postgres", "fence-session", "raw-advisory"}, {"etcd", "fence", "raw"}}
	for _, p := range floors {
		f, o := rep.result(p.store, p.fence), rep.result(p.store, p.other)
		if f == nil || o == nil {
			continue
		}
		x := float64(f.Serial.P50) / float64(o.Serial.P50)
		add("uncontended acquire + release (1 client, p50) within 1.2x of the raw floor", p.store, x <= 1.2,
			"%s %s vs %s %s: %.2fx", p.fence, ms(f.Serial.P50), p.other, ms(o.Serial.P50), x)
	}
	for _, store := range rep.Stores {
		for _, f := range rep.store(store) {
			if f.Contender.Role != RoleFence {
				continue
			}
			for _, o := range rep.store(store) {
				if o.Contender.Role != RolePeer {
					continue
				}
				x := float64(f.Serial.P50) / float64(o.Serial.P50)
				add("uncontended acquire + release (1 client, p50) no slower than any peer", store, x <= 1,
					"%s %s vs %s %s: %.2fx", f.Contender.Name, ms(f.Serial.P50), o.Contender.Name, ms(o.Serial.P50), x)
			}
		}
	}
	for _, store := range rep.Stores {
		for _, f := range rep.store(store) {
			if f.Contender.Role != RoleFence {
				continue
			}
			raw := rep.result(store, rawOf[store+"/"+f.Contender.Name])
			for _, w := range rep.Config.Waiters {
				h := f.Handoff[w]
				x := float64(h.P50) / float64(f.Serial.P50)
				floor := ""
				if raw != nil && raw.Serial.P50 > 0 {
					floor = fmt.Sprintf(" (%s: %.2fx)", raw.Contender.Name, float64(raw.Handoff[w].P50)/float64(raw.Serial.P50))
				}
				add("handoff median within 2x of uncontended acquire + release", store, x <= 2,
					"%s, %s: handoff p50 %s vs acquire + release p50 %s: %.2fx%s", f.Contender.Name, waitersText(w), ms(h.P50), ms(f.Serial.P50), x, floor)
			}
		}
	}
	if f, o := rep.result("postgres", "fence-session"), rep.result("postgres", "pgx-advisory"); f != nil && o != nil {
		for _, w := range rep.Config.Waiters {
			a, b := f.Handoff[w].P50, o.Handoff[w].P50
			x := float64(a) / float64(b)
			add("session-mode handoff median within 1.2x of the server-side advisory wait", "postgres", x <= 1.2,
				"%s: fence-session %s vs pgx-advisory %s: %.2fx", waitersText(w), ms(a), ms(b), x)
		}
	}
	if f := rep.result("etcd", "fence"); f != nil {
		for _, w := range rep.Config.Waiters {
			p99 := f.Handoff[w].P99
			add("etcd handoff p99 under 10 ms", "etcd", p99 < 10*time.Millisecond, "%s: %s", waitersText(w), ms(p99))
		}
	}
	for _, store := range rep.Stores {
		var lightest *Result
		for _, o := range rep.store(store) {
			if o.Contender.Role == RolePeer && (lightest == nil || o.Allocs < lightest.Allocs) {
				lightest = o
			}
		}
		if lightest == nil {
			continue
		}
		for _, f := range rep.store(store) {
			if f.Contender.Role != RoleFence {
				continue
			}
			x := f.Allocs / lightest.Allocs
			add("allocations per acquire + release at most 2x the lightest peer", store, x <= 2,
				"%s %.0f vs %s %.0f: %.2fx", f.Contender.Name, f.Allocs, lightest.Contender.Name, lightest.Allocs, x)
		}
	}
	return ts
}

// WriteMarkdown writes the report as docs/performance.md.
func (rep *Report) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	pr := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	pr("# Performance\n\n")
	pr("<!-- Generated by bench/cmd/fence-bench; edit the generator (its prose: bench/analysis.md), not this file. -->\n\n")
	pr("fence side by side with the Go libraries people use for the same stores and with each\n")
	pr("store's raw protocol (the fewest round trips that take a lock and issue a fencing token),\n")
	pr("measured in one run, on the same private servers, interleaved.\n\n")
	pr("## How it was measured\n\n")
	pr("From `bench/` (its own Go module, so the library never depends on the peers):\n\n")
	pr("```sh\n%s\n```\n\n", rep.Command)
	pr("- date: %s; the run took %s\n", rep.Date.UTC().Format("2006-01-02 15:04 MST"), rep.Took.Round(time.Second))
	pr("- machine: %d CPU (%s), %s, %s\n", rep.Machine.CPUs, rep.Machine.CPUModel, rep.Machine.Kernel, rep.Machine.Go)
	var vs []string
	for _, s := range rep.Stores {
		if v := rep.Machine.Servers[s]; v != "" {
			vs = append(vs, v)
		}
	}
	if libs := libraryVersions(); libs != "" {
		pr("- libraries: %s\n", libs)
	}
	pr("- servers: %s, each private, on loopback, started by `internal/testkit/testserver` "+
		"(Redis without persistence; PostgreSQL with fsync off; etcd with its defaults for its version)\n", strings.Join(vs, ", "))
	c := rep.Config
	pr("- every contender asks for a %v TTL, so nothing renews or expires during a measurement\n", TTL)
	pr("- stores are measured one after another; uncontended: %d rounds; in each, every contender of the store in turn (in a shuffled order, another each round) "+
		"does %d acquire + release pairs with 1 client on one key, then %d with each of %d goroutines of one client on keys of their own; "+
		"p50 and p99 are of single pairs, pairs/s of the whole turn\n", c.Rounds, c.Ops, c.Ops, c.Parallel)
	pr("- allocations and bytes: `runtime.MemStats` around the 1-client turns, per pair (the whole process, " +
		"so the client's background work counts too); client CPU: the process's user and system time " +
		"(`getrusage`) around the same turns, per pair, its system calls and garbage collection included; round trips: requests the client sent to the store per pair " +
		"(go-redis hook, pgx tracer, gRPC unary interceptor; watch and keepalive streams not counted); " +
		"server time: the server's own time executing them, per pair, from `INFO commandstats` (Redis) and " +
		"`pg_stat_statements` (PostgreSQL, execution only, not planning)\n")
	pr("- handoff: for 1 to N waiters, N+1 clients of the contender, each opened like a separate process, "+
		"take one key in turn; a holder keeps it until all the others are inside their Lock call and %v more "+
		"(the first holder of each turn 100 ms more again, so that every waiter is queued before the first handoff), "+
		"then releases; the figure is the time from its Unlock call to another client's Lock returning. "+
		"%d rounds, %d handoffs per contender per round%s\n", c.Hold, c.Rounds, c.Handoffs, fewerRounds(c))
	pr("- ratios are fence's figure divided by the other's: below 1 fence takes less time (or allocates less); " +
		"for pairs/s above 1 fence does more\n")
	pr("- timings on a shared 2-core machine are noisy; compare ratios more than absolute figures, and rerun before trusting a difference under about 10%%\n\n")

	for _, store := range rep.Stores {
		rs := rep.store(store)
		if len(rs) == 0 {
			continue
		}
		pr("## %s\n\n", storeTitles[store])
		pr("| contender | role | one acquire + release |\n|---|---|---|\n")
		for _, r := range rs {
			pr("| %s | %s | %s |\n", r.Contender.Name, r.Contender.Role, r.Contender.Desc)
		}
		pr("\n")
		comps := Comparisons(store)
		pr("| |")
		for _, r := range rs {
			pr(" %s |", r.Contender.Name)
		}
		for _, cp := range comps {
			pr(" %s ÷ %s |", cp.Fence, cp.Other)
		}
		pr("\n|---|%s\n", strings.Repeat("--:|", len(rs)+len(comps)))
		for _, row := range rep.Rows(store) {
			pr("| %s |", row.Label)
			for _, r := range rs {
				pr(" %s |", num(row.Values[r.Contender.Name]))
			}
			for _, x := range row.Ratios {
				pr(" %s |", ratio(x))
			}
			pr("\n")
		}
		pr("\n")
	}

	if rep.Scale != nil {
		rep.writeScale(pr)
	}

	pr("## Targets\n\n")
	pr("The goals of issue 8, judged on the figures above. For the handoff goal, the raw floor's own ratio " +
		"of handoff to acquire + release is in brackets: what the store and this machine allow.\n\n")
	pr("| goal | store | measured | met |\n|---|---|---|---|\n")
	for _, t := range rep.Targets() {
		met := "no"
		if t.Met {
			met = "yes"
		}
		pr("| %s | %s | %s | %s |\n", t.Goal, t.Store, t.Measured, met)
	}
	pr("\n")
	if rep.Analysis != "" {
		pr("%s\n", strings.TrimSpace(rep.Analysis))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// sortedStores returns stores in the report order of Stores.
func sortedStores(stores []string) []string {
	out := slices.Clone(stores)
	slices.SortFunc(out, func(a, b string) int { return slices.Index(Stores, a) - slices.Index(Stores, b) })
	return out
}

// Measure runs cfg against the contenders of stores on srv and returns the
// report, without its Command.
func Measure(ctx context.Context, srv *Servers, stores []string, cfg Config) (*Report, error) {
	stores = sortedStores(stores)
	start := time.Now()
	var results []*Result
	// One store after another: a store's turns are compared with each
	// other only, and another store's server would only add its own
	// load to theirs.
	for _, store := range stores {
		var cs []Contender
		for _, c := range Contenders(srv) {
			if c.Store == store && (cfg.Only == nil || cfg.Only(c.ID())) {
				cs = append(cs, c)
			}
		}
		if len(cs) == 0 {
			continue
		}
		rs, err := Run(ctx, srv, cs, cfg)
		if err != nil {
			return nil, err
		}
		results = append(results, rs...)
	}
	return &Report{
		Date:     start,
		Took:     time.Since(start),
		Machine:  ThisMachine(srv.Versions),
		Config:   cfg,
		Stores:   stores,
		Results:  results,
		Analysis: Analysis,
	}, nil
}

// fewerRounds says which handoff measurements have fewer rounds.
func fewerRounds(c Config) string {
	var s []string
	for _, w := range c.Waiters {
		if r := c.HandoffRounds(w); r != c.Rounds {
			s = append(s, fmt.Sprintf("%d with %s", r, waitersText(w)))
		}
	}
	if len(s) == 0 {
		return ""
	}
	return " (" + strings.Join(s, ", ") + ", so that the clients opened and the waits keep the run short)"
}

func waitersText(n int) string {
	if n == 1 {
		return "1 waiter"
	}
	return fmt.Sprintf("%d waiters", n)
}

// libraryVersions lists the versions of the client libraries in this
// build, from its build information.
func libraryVersions() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	want := []string{"github.com/go-redsync/redsync/v4", "github.com/bsm/redislock", "github.com/redis/go-redis/v9",
		"github.com/jackc/pgx/v5", "go.etcd.io/etcd/client/v3"}
	var out []string
	for _, path := range want {
		for _, m := range bi.Deps {
			if m.Path == path {
				out = append(out, path+" "+m.Version)
			}
		}
	}
	return strings.Join(out, ", ")
}
