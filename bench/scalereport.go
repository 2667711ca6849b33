package bench

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// writeScale writes the scale section and its targets.
func (rep *Report) writeScale(pr func(format string, args ...any)) {
	sc := rep.Scale
	c := sc.Config
	pr("## Scale\n\n")
	if p := strings.TrimSpace(ScaleProse); p != "" {
		pr("%s\n\n", p)
	}
	pr("- this run: N = %s leases held for %v each, TTL %v (renewed every %v); %d clients over %d keys: %d rounds of %d pairs per client%s; "+
		"handoff with %s waiters (table rows in each store's section above)\n\n",
		joinInts(c.Held), c.HoldFor, c.TTL, (c.TTL / 3).Round(time.Millisecond), c.Clients, c.Keys, c.Rounds, c.Ops, turnLimit(c.Turn), joinInts(rep.Config.Waiters))

	for _, store := range sc.heldStores() {
		pr("### Holding N leases: %s\n\n", storeTitles[store])
		var hs []Holding
		for _, r := range sc.Held {
			if r.Holding.Store == store && !slices.ContainsFunc(hs, func(h Holding) bool { return h.Name == r.Holding.Name }) {
				hs = append(hs, r.Holding)
			}
		}
		pr("| holder | role | how |\n|---|---|---|\n")
		for _, h := range hs {
			pr("| %s | %s | %s |\n", h.Name, h.Role, h.Desc)
		}
		pr("\n| N | holder | round trips/s | round trips per TTL/3 | server commands/s | client CPU per lease (µs/s) | heap per lease (bytes) | goroutines | connections |\n")
		pr("|--:|---|--:|--:|--:|--:|--:|--:|--:|\n")
		for _, n := range c.Held {
			for _, h := range hs {
				for _, r := range sc.Held {
					if r.Holding.ID() == h.ID() && r.N == n && r.Err != "" {
						pr("| %d | %s | failed: %s | | | | | | |\n", n, h.Name, strings.ReplaceAll(r.Err, "|", "\\|"))
					}
				}
				r := sc.held(store, h.Name, n)
				if r == nil {
					continue
				}
				cmds := "–"
				if r.Commands >= 0 {
					cmds = num(r.CommandsPerSec())
				}
				pr("| %d | %s | %s | %s | %s | %s | %s | %d | %d |\n", n, h.Name, num(r.RoundTripsPerSec()), num(r.RoundTripsPerRenewal()),
					cmds, num(r.CPUPerLease()), signed(r.HeapPerLease), r.Goroutines, r.Conns)
			}
		}
		pr("\n")
		rep.chartLinks(pr, "held-"+store)
	}

	if len(sc.Spread) > 0 || len(sc.SpreadFailed) > 0 {
		pr("### %d clients over %d keys\n\n", c.Clients, c.Keys)
		if len(sc.Spread) > 0 {
			pr("| store | contender | pairs/s | p50 (ms) | p99 (ms) | pairs/s ÷ raw floor |\n|---|---|--:|--:|--:|--:|\n")
		}
		ms := func(d time.Duration) string { return num(float64(d) / float64(time.Millisecond)) }
		for _, r := range sc.Spread {
			x := "–"
			if r.Contender.Role == RoleFence {
				if o := sc.spreadOf(r.Contender.Store, floorOf(r.Contender.Store, r.Contender.Name)); o != nil && o.Rate > 0 {
					x = ratio(r.Rate / o.Rate)
				}
			}
			pr("| %s | %s | %s | %s | %s | %s |\n", storeTitles[r.Contender.Store], r.Contender.Name, num(r.Rate), ms(r.Stats.P50), ms(r.Stats.P99), x)
		}
		if len(sc.Spread) > 0 {
			pr("\n")
		}
		for _, store := range sortedStores(slices.Collect(maps.Keys(sc.SpreadFailed))) {
			pr("- %s: not measured: %s\n", storeTitles[store], sc.SpreadFailed[store])
		}
		if len(sc.SpreadFailed) > 0 {
			pr("\n")
		}
	}

	if slices.ContainsFunc(rep.Charts, func(ch Chart) bool { return strings.HasPrefix(ch.Name, "handoff-") }) {
		pr("### Handoff against waiters\n\n")
		for _, store := range rep.Stores {
			rep.chartLinks(pr, "handoff-"+store)
		}
	}
	pr("### Scale targets\n\n")
	pr("The goals of issue 23, each a ratio (or a count) within this one run.\n\n")
	pr("| goal | store | measured | met |\n|---|---|---|---|\n")
	for _, t := range rep.ScaleTargets() {
		met := "no"
		if t.Met {
			met = "yes"
		}
		pr("| %s | %s | %s | %s |\n", t.Goal, t.Store, t.Measured, met)
	}
	pr("\n")
}

// chartLinks links the charts whose names start with prefix, if any.
func (rep *Report) chartLinks(pr func(format string, args ...any), prefix string) {
	linked := false
	for _, ch := range rep.Charts {
		if strings.HasPrefix(ch.Name, prefix) {
			pr("![%s](%s)\n", ch.Title, ch.Link)
			linked = true
		}
	}
	if linked {
		pr("\n")
	}
}

func turnLimit(d time.Duration) string {
	if d <= 0 {
		return ""
	}
	return fmt.Sprintf(" (a client starts no pair once its turn has lasted %v)", d)
}

func joinInts(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = fmt.Sprint(n)
	}
	return strings.Join(s, ", ")
}

// signed is num for figures that may be negative (a heap that shrank).
func signed(v float64) string {
	if v < 0 {
		return "-" + num(-v)
	}
	return num(v)
}

// Chart is one SVG file the command writes beside the report.
type Chart struct {
	Name, Title string
	// Link is the file's path relative to the report.
	Link string
}

// series is one line of a chart.
type series struct {
	name string
	xys  plotter.XYs
}

// WriteCharts draws the charts of the scale section and of the handoffs
// as SVG files in dir, and records them in rep.Charts with links made of
// link (the way from the report to dir) and their names.
func (rep *Report) WriteCharts(dir, link string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	rep.Charts = nil
	save := func(name, title, xl, yl string, ss []series) error {
		file := name + ".svg"
		if err := drawChart(filepath.Join(dir, file), title, xl, yl, ss); err != nil {
			return fmt.Errorf("chart %s: %w", name, err)
		}
		rep.Charts = append(rep.Charts, Chart{Name: name, Title: title, Link: filepath.ToSlash(filepath.Join(link, file))})
		return nil
	}
	if sc := rep.Scale; sc != nil {
		for _, store := range sc.heldStores() {
			var cpu, rt []series
			for _, r := range sc.Held {
				if r.Holding.Store != store || r.Err != "" {
					continue
				}
				i := slices.IndexFunc(cpu, func(s series) bool { return s.name == r.Holding.Name })
				if i < 0 {
					cpu = append(cpu, series{name: r.Holding.Name})
					rt = append(rt, series{name: r.Holding.Name})
					i = len(cpu) - 1
				}
				cpu[i].xys = append(cpu[i].xys, plotter.XY{X: float64(r.N), Y: r.CPUPerLease()})
				rt[i].xys = append(rt[i].xys, plotter.XY{X: float64(r.N), Y: r.RoundTripsPerSec()})
			}
			t := storeTitles[store]
			if err := save("held-"+store+"-cpu", t+": client CPU per held lease", "leases held (N)", "µs of CPU per lease per second", cpu); err != nil {
				return err
			}
			if err := save("held-"+store+"-roundtrips", t+": round trips to keep N leases", "leases held (N)", "round trips per second", rt); err != nil {
				return err
			}
		}
	}
	for _, store := range rep.Stores {
		var ss []series
		for _, r := range rep.store(store) {
			s := series{name: r.Contender.Name + " p50"}
			for _, w := range rep.Config.Waiters {
				s.xys = append(s.xys, plotter.XY{X: float64(w), Y: float64(r.Handoff[w].P50) / float64(time.Millisecond)})
			}
			ss = append(ss, s)
		}
		if len(ss) == 0 || len(rep.Config.Waiters) == 0 {
			continue
		}
		if err := save("handoff-"+store, storeTitles[store]+": handoff against waiters", "waiters", "handoff p50 (ms)", ss); err != nil {
			return err
		}
	}
	return nil
}

// drawChart draws ss on log-log axes into an SVG file; points that a log
// axis cannot show (0 or below) are left out.
func drawChart(file, title, xl, yl string, ss []series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xl
	p.Y.Label.Text = yl
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = plot.LogTicks{Prec: -1}, plot.LogTicks{Prec: -1}
	p.Legend.Top = true
	p.Add(plotter.NewGrid())
	var all plotter.XYs
	for i, s := range ss {
		xys := slices.DeleteFunc(slices.Clone(s.xys), func(v plotter.XY) bool { return !(v.X > 0 && v.Y > 0) })
		if len(xys) == 0 {
			continue
		}
		all = append(all, xys...)
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		l.Color = plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i)
		pts.Color = plotutil.Color(i)
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(s.name, l, pts)
	}
	// gonum widens an axis whose data span nothing by 1 either way, which
	// a log axis cannot show from 1: give such an axis a range of its own.
	if len(all) == 0 {
		all = plotter.XYs{{X: 1, Y: 1}}
	}
	xmin, xmax, ymin, ymax := plotter.XYRange(all)
	if xmin == xmax {
		p.X.Min, p.X.Max = xmin/2, xmax*2
	}
	if ymin == ymax {
		p.Y.Min, p.Y.Max = ymin/2, ymax*2
	}
	return p.Save(7*vg.Inch, 4.5*vg.Inch, file)
}
