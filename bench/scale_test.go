package bench

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"gonum.org/v1/plot/plotter"
)

// The raw floors keep N keys alive with one request per renew interval,
// and the counters say so: about k round trips in k intervals whatever N
// (a counter that counted per key would see k·N), and the server's own
// count agrees (Redis: EVALSHA, and the GET and PEXPIRE it calls, per key;
// PostgreSQL: one UPDATE).
func TestHeldRawFloorCounts(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers and holds leases for seconds")
	}
	srv := StartServers(t, []string{"redis", "postgres"})
	t.Cleanup(srv.Close)
	cfg := ScaleConfig{TTL: 600 * time.Millisecond, HoldFor: 2 * time.Second}
	const n = 10
	perRenewal := map[string]int64{"redis": 3 * n, "postgres": 1}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, h := range Holdings(srv) {
		if h.Role != RoleRaw {
			continue
		}
		t.Run(h.ID(), func(t *testing.T) {
			r, err := measureHeld(ctx, srv, h, n, cfg)
			if err != nil {
				t.Fatal(err)
			}
			k := r.Renewals // 10 renew intervals of 200 ms in 2 s
			if got := float64(r.RoundTrips); got < k-2 || got > k+1 {
				t.Errorf("%d round trips in %.1f renew intervals holding %d keys, want about %.0f (one per interval)", r.RoundTrips, k, n, k)
			}
			if r.Commands < 0 {
				t.Skip("the server does not count its commands (no pg_stat_statements)")
			}
			want := perRenewal[h.Store] * r.RoundTrips
			if r.Commands < want-perRenewal[h.Store] || r.Commands > want+perRenewal[h.Store] {
				t.Errorf("server counted %d commands for %d renewals of %d keys, want %d", r.Commands, r.RoundTrips, n, want)
			}
			if r.Conns != 1 {
				t.Errorf("%d connections, want 1", r.Conns)
			}
		})
	}
}

// The scale section's generator on a tiny configuration: its tables,
// targets and charts are produced from the real servers.
func TestScaleSection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers and measures for several seconds")
	}
	stores := []string{"redis", "postgres"}
	srv := StartServers(t, stores)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := Config{Rounds: 1, Ops: 3, Parallel: 2, Handoffs: 2, Waiters: []int{1, 4}, Hold: 2 * time.Millisecond}
	rep, err := Measure(ctx, srv, stores, cfg)
	if err != nil {
		t.Fatal(err)
	}
	scfg := ScaleConfig{Held: []int{1, 10}, TTL: 600 * time.Millisecond, HoldFor: time.Second, Clients: 4, Keys: 20, Ops: 3, Rounds: 1}
	if rep.Scale, err = MeasureScale(ctx, srv, stores, scfg); err != nil {
		t.Fatal(err)
	}
	rep.Command = "go run ./cmd/fence-bench -held 1,10"

	if got, want := len(rep.Scale.Held), 2*2*2; got != want { // stores × N × (fence, raw)
		t.Errorf("%d holding results, want %d", got, want)
	}
	for _, r := range rep.Scale.Held {
		if r.RoundTrips <= 0 || r.CPU <= 0 || r.Conns <= 0 {
			t.Errorf("%s, N = %d: round trips %d, CPU %v, connections %d: want all positive", r.Holding.ID(), r.N, r.RoundTrips, r.CPU, r.Conns)
		}
	}
	for _, store := range stores {
		for _, name := range []string{"fence", "raw"} {
			if store == "postgres" {
				name += "-lease"
			}
			if r := rep.Scale.spreadOf(store, name); r == nil || !(r.Rate > 0) || r.Stats.N != scfg.Clients*scfg.Ops {
				t.Errorf("%s/%s: many clients over many keys: %+v, want %d pairs at a positive rate", store, name, r, scfg.Clients*scfg.Ops)
			}
		}
	}

	dir := filepath.Join(t.TempDir(), "performance")
	if err := rep.WriteCharts(dir, "performance"); err != nil {
		t.Fatal(err)
	}
	want := []string{"held-redis-cpu", "held-redis-roundtrips", "held-postgres-cpu", "held-postgres-roundtrips", "handoff-redis", "handoff-postgres"}
	if len(rep.Charts) != len(want) {
		t.Errorf("%d charts, want %d", len(rep.Charts), len(want))
	}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, name := range want {
		b, err := os.ReadFile(filepath.Join(dir, name+".svg"))
		if err != nil {
			t.Error(err)
			continue
		}
		if !bytes.Contains(b, []byte("<svg")) || !bytes.Contains(b, []byte("<path")) {
			t.Errorf("%s.svg is not a drawn SVG", name)
		}
		if !strings.Contains(md.String(), "(performance/"+name+".svg)") {
			t.Errorf("the report does not link %s.svg", name)
		}
	}
	for _, s := range []string{"## Scale", "### Holding N leases: Redis", "### Holding N leases: PostgreSQL",
		"| 10 | fence |", "| 10 | raw-lease |", "### 4 clients over 20 keys", "### Scale targets",
		"renewal round trips per TTL/3", "client CPU per held lease within 1.5x", "heap per held lease under 2 KB",
		"pairs/s at least 0.9x the raw floor", "handoff (p50 and p99) within 1.2x of the raw floor"} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("report lacks %q", s)
		}
	}
	if strings.Contains(md.String(), "NaN") || strings.Contains(md.String(), "Inf") {
		t.Errorf("report has NaN or Inf:\n%s", md.String())
	}
}

// 128 waiters get fewer rounds, and the report says so.
func TestHandoffRounds(t *testing.T) {
	c := DefaultConfig()
	for w, want := range map[int]int{1: c.Rounds, 32: c.Rounds, 64: c.Rounds, 128: c.Rounds / 2} {
		if got := c.HandoffRounds(w); got != want {
			t.Errorf("HandoffRounds(%d) = %d, want %d", w, got, want)
		}
	}
	if s := fewerRounds(c); !strings.Contains(s, "5 with 128 waiters") {
		t.Errorf("fewerRounds = %q, want it to name 5 rounds with 128 waiters", s)
	}
}

// The renewal target on known counts: one round trip per renew interval
// and connection passes (one more over the window for its edges), one
// per lease fails.
func TestScaleTargetsRenewal(t *testing.T) {
	fence := Holding{Store: "redis", Name: "fence", Role: RoleFence}
	cases := []struct {
		n, conns   int
		roundTrips int64
		met        bool
	}{
		{n: 1, conns: 1, roundTrips: 9, met: true},
		{n: 1, conns: 1, roundTrips: 10, met: true}, // a renewal at the window's edge
		{n: 1, conns: 1, roundTrips: 11, met: false},
		{n: 1000, conns: 4, roundTrips: 9 * 14, met: true},
		{n: 1000, conns: 4, roundTrips: 9 * 1000, met: false}, // a round trip per lease
	}
	for _, c := range cases {
		rep := &Report{Scale: &Scale{Config: ScaleConfig{Held: []int{c.n}},
			Held: []*HeldResult{{Holding: fence, N: c.n, Window: 9 * time.Second, Renewals: 9, RoundTrips: c.roundTrips, Conns: c.conns}}}}
		var got []Target
		for _, tg := range rep.ScaleTargets() {
			if strings.HasPrefix(tg.Goal, "renewal round trips") {
				got = append(got, tg)
			}
		}
		if len(got) != 1 || got[0].Met != c.met {
			t.Errorf("N = %d, %d connections, %d round trips in 9 intervals: targets %+v, want one, met = %v", c.n, c.conns, c.roundTrips, got, c.met)
		}
	}
}

// A chart of one waiter count, or of nothing, is drawn all the same
// (gonum's log axes cannot show a range widened to 0).
func TestDrawChartDegenerate(t *testing.T) {
	for name, ss := range map[string][]series{
		"one":  {{name: "fence p50", xys: plotter.XYs{{X: 1, Y: 0.5}}}},
		"none": {{name: "fence p50", xys: plotter.XYs{{X: 1, Y: 0}}}},
	} {
		file := filepath.Join(t.TempDir(), name+".svg")
		if err := drawChart(file, name, "waiters", "ms", ss); err != nil {
			t.Errorf("%s: %v", name, err)
		} else if b, err := os.ReadFile(file); err != nil || !bytes.Contains(b, []byte("<svg")) {
			t.Errorf("%s: no SVG written (%v)", name, err)
		}
	}
}

func TestFirstError(t *testing.T) {
	one := errors.New("a")
	if got := firstError(one); got != "a" {
		t.Errorf("firstError(a) = %q", got)
	}
	if got := firstError(errors.Join(one, errors.New("b"), errors.New("c"))); got != "a (and 2 more)" {
		t.Errorf("firstError(a, b, c) = %q, want %q", got, "a (and 2 more)")
	}
}

// A holding that failed (fence losing leases it could not renew in
// time) shows in its table row and as a target not met.
func TestScaleHeldFailed(t *testing.T) {
	fence := Holding{Store: "redis", Name: "fence", Role: RoleFence}
	raw := Holding{Store: "redis", Name: "raw", Role: RoleRaw}
	rep := &Report{Scale: &Scale{Config: ScaleConfig{Held: []int{10000}, TTL: 3 * time.Second}, Held: []*HeldResult{
		{Holding: fence, N: 10000, Err: "9988 of 10000 leases lost while held"},
		{Holding: raw, N: 10000, Window: 9 * time.Second, Renewals: 9, RoundTrips: 9, Commands: 270000, CPU: time.Second, Conns: 1},
	}}}
	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"| 10000 | fence | failed: 9988 of 10000 leases lost while held |", "| 10000 | raw | 1.00 |",
		"| holding N leases | redis | fence, N = 10000: 9988 of 10000 leases lost while held | no |"} {
		if !strings.Contains(md.String(), s) {
			t.Errorf("report lacks %q", s)
		}
	}
	if strings.Contains(md.String(), "NaN") || strings.Contains(md.String(), "Inf") {
		t.Errorf("report has NaN or Inf:\n%s", md.String())
	}
}
