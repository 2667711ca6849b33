package bench

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ScaleConfig says how much the scale section measures.
type ScaleConfig struct {
	// Held are the numbers of leases one process holds.
	Held []int
	// TTL is the held leases' TTL; HoldFor is how long they are held
	// while measured: several renew intervals (TTL/3).
	TTL, HoldFor time.Duration
	// Clients acquire and release keys drawn at random from Keys keys,
	// Ops pairs each per turn, in Rounds rounds; a client starts no pair
	// once its turn has lasted Turn, so that a slow store (SQLite with 64
	// writers) does not lengthen the run by minutes.
	Clients, Keys, Ops, Rounds int
	Turn                       time.Duration
	// Log receives progress lines; nil discards them.
	Log io.Writer
}

// DefaultScaleConfig is the scale section of the full run.
func DefaultScaleConfig() ScaleConfig {
	return ScaleConfig{Held: []int{1, 100, 1000, 10000}, TTL: 3 * time.Second, HoldFor: 9 * time.Second,
		Clients: 64, Keys: 10000, Ops: 40, Rounds: 3, Turn: 3 * time.Second}
}

// QuickScaleConfig is a first look of the scale section.
func QuickScaleConfig() ScaleConfig {
	return ScaleConfig{Held: []int{1, 100, 1000}, TTL: time.Second, HoldFor: 2 * time.Second,
		Clients: 64, Keys: 10000, Ops: 10, Rounds: 1, Turn: 2 * time.Second}
}

// ScaleProse is the scale section's text, before its tables: what it
// measures and how (the figures are measured on every run).
//
//go:embed scale.md
var ScaleProse string

// Scale is what the scale section measured.
type Scale struct {
	Config ScaleConfig
	Held   []*HeldResult
	Spread []*SpreadResult
	// SpreadFailed says, by store, why many clients over many keys
	// could not be measured there (SQLite's writers can wait past their
	// busy timeout with 64 of them on a loaded machine): the run goes
	// on and the report says so.
	SpreadFailed map[string]string
}

// SpreadResult is Clients clients of one contender acquiring and
// releasing keys drawn at random from Keys keys.
type SpreadResult struct {
	Contender Contender
	Stats     Stats
	Rate      float64 // pairs per second, all clients together
}

// MeasureScale measures the scale section on stores: the holding of many
// leases (Redis and PostgreSQL lease mode), then many clients over many
// keys (fence and the raw floors of every store).
func MeasureScale(ctx context.Context, srv *Servers, stores []string, cfg ScaleConfig) (*Scale, error) {
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", args...)
		}
	}
	stores = sortedStores(stores)
	sc := &Scale{Config: cfg}
	for _, store := range stores {
		var hs []Holding
		for _, h := range Holdings(srv) {
			if h.Store == store {
				hs = append(hs, h)
			}
		}
		for i, n := range cfg.Held {
			if len(hs) == 0 {
				break
			}
			logf("%s: holding %d leases for %v (TTL %v)", store, n, cfg.HoldFor, cfg.TTL)
			for _, j := range turnOrder(len(hs), i) {
				r, err := measureHeld(ctx, srv, hs[j], n, cfg)
				if err != nil {
					if ctx.Err() != nil {
						return nil, fmt.Errorf("%s: holding %d: %w", hs[j].ID(), n, err)
					}
					logf("%s: holding %d: %v", hs[j].ID(), n, err)
					r = &HeldResult{Holding: hs[j], N: n, Err: firstError(err)}
				}
				sc.Held = append(sc.Held, r)
			}
		}
	}
	for _, store := range stores {
		var cs []Contender
		for _, c := range Contenders(srv) {
			if c.Store == store && c.Role != RolePeer {
				cs = append(cs, c)
			}
		}
		if len(cs) == 0 {
			continue
		}
		logf("%s: %d clients over %d keys: %d rounds of %d acquire+release per client", store, cfg.Clients, cfg.Keys, cfg.Rounds, cfg.Ops)
		rs, err := measureSpread(ctx, cs, cfg)
		if err != nil {
			if ctx.Err() != nil {
				return nil, err
			}
			logf("%s: %v", store, err)
			if sc.SpreadFailed == nil {
				sc.SpreadFailed = map[string]string{}
			}
			sc.SpreadFailed[store] = firstError(err)
			continue
		}
		sc.Spread = append(sc.Spread, rs...)
	}
	return sc, nil
}

// firstError is the first line of err (errors.Join puts one error a
// line), and how many more there were.
func firstError(err error) string {
	first, rest, _ := strings.Cut(err.Error(), "\n")
	if n := strings.Count(rest, "\n") + 1; rest != "" {
		return fmt.Sprintf("%s (and %d more)", first, n)
	}
	return first
}

func measureSpread(ctx context.Context, cs []Contender, cfg ScaleConfig) ([]*SpreadResult, error) {
	clients := make([]Client, len(cs))
	defer func() {
		for _, cl := range clients {
			if cl != nil {
				_ = cl.Close()
			}
		}
	}()
	for i, c := range cs {
		cl, err := c.Open(ctx, new(atomic.Int64))
		if err != nil {
			return nil, fmt.Errorf("%s: open: %w", c.ID(), err)
		}
		clients[i] = cl
		if _, _, err := spread(ctx, cl, cfg.Clients, 2, cfg.Keys, "bench/warm-s/"+c.Name, 0, cfg.Turn); err != nil {
			return nil, fmt.Errorf("%s: warm-up: %w", c.ID(), err)
		}
	}
	lat := make([][]time.Duration, len(cs))
	took := make([]time.Duration, len(cs))
	for round := range cfg.Rounds {
		for _, i := range turnOrder(len(cs), round) {
			l, d, err := spread(ctx, clients[i], cfg.Clients, cfg.Ops, cfg.Keys, "bench/s/"+cs[i].Name, uint64(round), cfg.Turn)
			if err != nil {
				return nil, fmt.Errorf("%s: %d clients over %d keys: %w", cs[i].ID(), cfg.Clients, cfg.Keys, err)
			}
			lat[i] = append(lat[i], l...)
			took[i] += d
		}
	}
	out := make([]*SpreadResult, len(cs))
	for i, c := range cs {
		out[i] = &SpreadResult{Contender: c, Stats: summarize(lat[i]), Rate: float64(len(lat[i])) / took[i].Seconds()}
	}
	return out, nil
}

// spread runs clients goroutines, each doing ops acquire + release pairs,
// each pair on a key drawn at random from keys keys under prefix (two
// goroutines may draw the same key: then one waits), and starting none
// once turn has passed (0: no limit). It returns the time of every pair
// done and of the whole turn.
func spread(ctx context.Context, cl Client, clients, ops, keys int, prefix string, seed uint64, turn time.Duration) ([]time.Duration, time.Duration, error) {
	lat := make([]time.Duration, clients*ops)
	done := make([]int, clients)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	start := time.Now()
	for g := range clients {
		lk := cl.Locker()
		rng := rand.New(rand.NewPCG(seed, uint64(g)))
		wg.Go(func() {
			defer closeLocker(lk)
			mine := lat[g*ops : (g+1)*ops]
			for j := range mine {
				if turn > 0 && time.Since(start) >= turn {
					return
				}
				done[g] = j + 1
				k := prefix + "/" + strconv.Itoa(rng.IntN(keys))
				t := time.Now()
				if err := lk.Lock(ctx, k); err != nil {
					errs[g] = fmt.Errorf("lock: %w", err)
					return
				}
				if err := lk.Unlock(ctx); err != nil {
					errs[g] = fmt.Errorf("unlock: %w", err)
					return
				}
				mine[j] = time.Since(t)
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	out := lat[:0:0]
	for g, n := range done {
		out = append(out, lat[g*ops:g*ops+n]...)
	}
	return out, took, errors.Join(errs...)
}

// floorOf names the raw floor of a fence contender of store, or "" if
// the store has none.
func floorOf(store, name string) string {
	if raw, ok := rawOf[store+"/"+name]; ok {
		return raw
	}
	for _, c := range Comparisons(store) {
		if c.Fence == name && c.Other == "raw" {
			return "raw"
		}
	}
	return ""
}

// held is the result of holding n leases by store/name, nil if none or
// if it failed.
func (sc *Scale) held(store, name string, n int) *HeldResult {
	for _, r := range sc.Held {
		if r.Holding.Store == store && r.Holding.Name == name && r.N == n && r.Err == "" {
			return r
		}
	}
	return nil
}

func (sc *Scale) spreadOf(store, name string) *SpreadResult {
	for _, r := range sc.Spread {
		if r.Contender.Store == store && r.Contender.Name == name {
			return r
		}
	}
	return nil
}

// heldStores are the stores with holding figures, in report order.
func (sc *Scale) heldStores() []string {
	var out []string
	for _, r := range sc.Held {
		if !slices.Contains(out, r.Holding.Store) {
			out = append(out, r.Holding.Store)
		}
	}
	return sortedStores(out)
}

// fenceHoldings are the fence holdings measured on store.
func (sc *Scale) fenceHoldings(store string) []Holding {
	var out []Holding
	for _, r := range sc.Held {
		if r.Holding.Store == store && r.Holding.Role == RoleFence &&
			!slices.ContainsFunc(out, func(h Holding) bool { return h.Name == r.Holding.Name }) {
			out = append(out, r.Holding)
		}
	}
	return out
}

// ScaleTargets judges the targets of issue 23 on the figures of one run:
// the scale section's, and the handoffs of the store sections.
func (rep *Report) ScaleTargets() []Target {
	var ts []Target
	add := func(goal, store string, met bool, format string, args ...any) {
		ts = append(ts, Target{Goal: goal, Store: store, Measured: fmt.Sprintf(format, args...), Met: met})
	}
	if sc := rep.Scale; sc != nil {
		for _, store := range sc.heldStores() {
			for _, h := range sc.fenceHoldings(store) {
				raw := floorOf(store, h.Name)
				for _, n := range sc.Config.Held {
					f, o := sc.held(store, h.Name, n), sc.held(store, raw, n)
					for _, r := range sc.Held {
						if r.Holding.ID() == h.ID() && r.N == n && r.Err != "" {
							add("holding N leases", store, false, "%s, N = %d: %s", h.Name, n, r.Err)
						}
					}
					if f == nil {
						continue
					}
					// A window of k renew intervals catches k or k+1 renewals
					// of a lease, with its edges: one round trip is allowed
					// for that.
					limit := float64(n)/100 + float64(f.Conns)
					met := float64(f.RoundTrips-1) <= limit*f.Renewals
					add("renewal round trips per TTL/3 at most N/100 + store connections", store, met,
						"%s, N = %d: %d in %s renew intervals, %s per TTL/3, limit %s (%d connections)",
						h.Name, n, f.RoundTrips, num(f.Renewals), num(f.RoundTripsPerRenewal()), num(limit), f.Conns)
					if o != nil && o.CPUPerLease() > 0 {
						x := f.CPUPerLease() / o.CPUPerLease()
						add("client CPU per held lease within 1.5x of the raw floor", store, x <= 1.5,
							"N = %d: %s %s µs/s vs %s %s µs/s: %.2fx", n, h.Name, num(f.CPUPerLease()), raw, num(o.CPUPerLease()), x)
					}
				}
				if n := slices.Max(sc.Config.Held); sc.held(store, h.Name, n) != nil {
					b := sc.held(store, h.Name, n).HeapPerLease
					add("heap per held lease under 2 KB", store, b < 2048, "%s, N = %d: %s bytes", h.Name, n, num(b))
				}
			}
		}
		for _, store := range sortedStores(slices.Collect(maps.Keys(sc.SpreadFailed))) {
			add(fmt.Sprintf("%d clients over %d keys: pairs/s at least 0.9x the raw floor", sc.Config.Clients, sc.Config.Keys), store, false,
				"not measured: %s", sc.SpreadFailed[store])
		}
		for _, f := range sc.Spread {
			if f.Contender.Role != RoleFence {
				continue
			}
			store := f.Contender.Store
			o := sc.spreadOf(store, floorOf(store, f.Contender.Name))
			if o == nil || o.Rate == 0 {
				continue
			}
			x := f.Rate / o.Rate
			add(fmt.Sprintf("%d clients over %d keys: pairs/s at least 0.9x the raw floor", sc.Config.Clients, sc.Config.Keys), store, x >= 0.9,
				"%s %s vs %s %s: %.2fx", f.Contender.Name, num(f.Rate), o.Contender.Name, num(o.Rate), x)
		}
	}
	ms := func(d time.Duration) string { return num(float64(d)/float64(time.Millisecond)) + " ms" }
	for _, store := range rep.Stores {
		for _, f := range rep.store(store) {
			if f.Contender.Role != RoleFence {
				continue
			}
			o := rep.result(store, floorOf(store, f.Contender.Name))
			if o == nil {
				continue
			}
			for _, w := range rep.Config.Waiters {
				for _, q := range []struct {
					name string
					get  func(Stats) time.Duration
				}{{"p50", func(s Stats) time.Duration { return s.P50 }}, {"p99", func(s Stats) time.Duration { return s.P99 }}} {
					a, b := q.get(f.Handoff[w]), q.get(o.Handoff[w])
					if b == 0 {
						continue
					}
					x := float64(a) / float64(b)
					add("handoff (p50 and p99) within 1.2x of the raw floor", store, x <= 1.2,
						"%s, %s, %s: %s vs %s %s: %.2fx", f.Contender.Name, waitersText(w), q.name, ms(a), o.Contender.Name, ms(b), x)
				}
			}
		}
	}
	return ts
}
