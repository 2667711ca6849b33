package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Config says how much to measure.
type Config struct {
	// Rounds is how many times every contender takes its turn in each
	// measurement. The turns of one round come in an order of their own
	// (turnOrder), so that neither a slow moment of the machine nor the
	// turn before (which may leave the server or the machine busy) lands
	// on one contender more than on another.
	Rounds int
	// Ops is how many uncontended acquire + release pairs one client does
	// in one turn; with Parallel clients, each does Ops.
	Ops int
	// Parallel is the number of clients of the parallel uncontended
	// measurement, each on its own key.
	Parallel int
	// Handoffs is how many handoffs are timed in one turn.
	Handoffs int
	// Waiters are the numbers of waiters of the handoff measurements.
	Waiters []int
	// Hold is how long a holder keeps the lock once every other
	// contender has called Lock, so that they are all waiting when it
	// releases.
	Hold time.Duration
	// Log receives progress lines; nil discards them.
	Log io.Writer
	// Only, if set, keeps the contenders whose ID (store/name) it accepts.
	Only func(id string) bool
}

// DefaultConfig is the full run that docs/performance.md reports.
func DefaultConfig() Config {
	return Config{Rounds: 10, Ops: 200, Parallel: 8, Handoffs: 20, Waiters: []int{1, 8, 32, 128}, Hold: 5 * time.Millisecond}
}

// HandoffRounds is the rounds of the handoff measurement with w waiters:
// Rounds, but fewer above 64 waiters (half as many with 128), so that the
// clients opened and the waits do not make the run much longer.
func (c Config) HandoffRounds(w int) int {
	return max(1, min(c.Rounds, c.Rounds*64/w))
}

// QuickConfig is a run of a few seconds per store, for the smoke test and
// a first look: its figures are too few to quote.
func QuickConfig() Config {
	return Config{Rounds: 2, Ops: 20, Parallel: 8, Handoffs: 3, Waiters: []int{1, 8, 32}, Hold: 5 * time.Millisecond}
}

// Stats summarizes latencies.
type Stats struct {
	N             int
	P50, P99, Avg time.Duration
}

func summarize(d []time.Duration) Stats {
	if len(d) == 0 {
		return Stats{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	var sum time.Duration
	for _, v := range s {
		sum += v
	}
	p99 := (len(s)*99 + 99) / 100 // ceil(0.99 n)
	return Stats{N: len(s), P50: s[len(s)/2], P99: s[p99-1], Avg: sum / time.Duration(len(s))}
}

// Result is what one contender measured.
type Result struct {
	Contender Contender

	// Serial is one client doing acquire + release on one key, one pair
	// after the other; SerialRate is its pairs per second.
	Serial     Stats
	SerialRate float64
	// Parallel is Config.Parallel clients doing the same, each on its
	// own key, at once; ParallelRate is their pairs per second together.
	Parallel     Stats
	ParallelRate float64
	// Allocs and Bytes are heap allocations and bytes per acquire +
	// release pair in the serial measurement (runtime.MemStats, whole
	// process: background work of the client, if any, included).
	Allocs, Bytes float64
	// RoundTrips is the requests sent to the store per acquire + release
	// pair in the serial measurement (commands, statements or unary
	// RPCs; messages on streams such as watches are not counted).
	RoundTrips float64
	// ServerTime is the time the server spent executing the requests of
	// one pair in the serial measurement, where it tells (Redis, and
	// PostgreSQL with pg_stat_statements); 0 where it does not.
	ServerTime time.Duration
	// ClientCPU is the CPU time (user and system) the whole benchmark
	// process spent per pair in the serial measurement: the client's own
	// work, its system calls and its garbage collection, whatever the
	// wait for the store.
	ClientCPU time.Duration
	// Handoff is the time from a holder's release to the next waiter
	// holding the lock, by number of waiters.
	Handoff map[int]Stats

	serial, parallel []time.Duration
	serialTime       time.Duration
	parallelTime     time.Duration
	parallelOps      int
	mallocs, bytes   uint64
	cpu              time.Duration
	rt               int64
	srvTime          time.Duration
	srvTimeKnown     bool
	handoff          map[int][]time.Duration
}

// Run measures every contender with cfg. It opens its own clients and
// closes them before returning. srv, if not nil, is asked for the
// servers' own time per request.
func Run(ctx context.Context, srv *Servers, contenders []Contender, cfg Config) ([]*Result, error) {
	logf := func(format string, args ...any) {
		if cfg.Log != nil {
			fmt.Fprintf(cfg.Log, format+"\n", args...)
		}
	}
	if len(contenders) == 0 {
		return nil, nil
	}
	results := make([]*Result, len(contenders))
	type opened struct {
		client Client
		rt     *atomic.Int64
	}
	clients := make([]opened, len(contenders))
	defer func() {
		for _, o := range clients {
			if o.client != nil {
				_ = o.client.Close()
			}
		}
	}()
	for i, c := range contenders {
		results[i] = &Result{Contender: c, Handoff: map[int]Stats{}, handoff: map[int][]time.Duration{}}
		rt := new(atomic.Int64)
		cl, err := c.Open(ctx, rt)
		if err != nil {
			return nil, fmt.Errorf("%s: open: %w", c.ID(), err)
		}
		clients[i] = opened{cl, rt}
	}

	// Warm up: connections, prepared statements, loaded scripts.
	for i, c := range contenders {
		if _, err := uncontended(ctx, clients[i].client, cfg.Parallel, 5, "bench/warm/"+c.Name); err != nil {
			return nil, fmt.Errorf("%s: warm-up: %w", c.ID(), err)
		}
	}

	logf("%s: uncontended: %d rounds of %d acquire+release per client, 1 and %d clients", contenders[0].Store, cfg.Rounds, cfg.Ops, cfg.Parallel)
	for round := range cfg.Rounds {
		for _, i := range turnOrder(len(contenders), round) {
			c, r, o := contenders[i], results[i], clients[i]

			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			srv0, known0 := srv.serverTime(ctx, c.Store)
			rt0 := o.rt.Load()
			cpu0 := processCPU()
			start := time.Now()
			var (
				lat []time.Duration
				err error
			)
			pprof.Do(ctx, pprof.Labels("contender", c.ID(), "turn", "1 client"), func(ctx context.Context) {
				lat, err = uncontended(ctx, o.client, 1, cfg.Ops, "bench/u1/"+c.Name)
			})
			took := time.Since(start)
			r.cpu += processCPU() - cpu0
			rt1 := o.rt.Load()
			runtime.ReadMemStats(&after)
			srv1, known1 := srv.serverTime(ctx, c.Store)
			if known0 && known1 {
				r.srvTime += srv1 - srv0
				r.srvTimeKnown = true
			}
			if err != nil {
				return nil, fmt.Errorf("%s: uncontended: %w", c.ID(), err)
			}
			r.serial = append(r.serial, lat...)
			r.serialTime += took
			r.mallocs += after.Mallocs - before.Mallocs
			r.bytes += after.TotalAlloc - before.TotalAlloc
			r.rt += rt1 - rt0

			start = time.Now()
			pprof.Do(ctx, pprof.Labels("contender", c.ID(), "turn", fmt.Sprintf("%d clients", cfg.Parallel)), func(ctx context.Context) {
				lat, err = uncontended(ctx, o.client, cfg.Parallel, cfg.Ops, fmt.Sprintf("bench/u%d/%s", cfg.Parallel, c.Name))
			})
			took = time.Since(start)
			if err != nil {
				return nil, fmt.Errorf("%s: uncontended, %d clients: %w", c.ID(), cfg.Parallel, err)
			}
			r.parallel = append(r.parallel, lat...)
			r.parallelTime += took
			r.parallelOps += len(lat)
		}
		logf("  round %d/%d done", round+1, cfg.Rounds)
	}

	for _, w := range cfg.Waiters {
		rounds := cfg.HandoffRounds(w)
		logf("%s: handoff, %d waiters: %d rounds of %d handoffs", contenders[0].Store, w, rounds, cfg.Handoffs)
		for round := range rounds {
			for _, i := range turnOrder(len(contenders), w*cfg.Rounds+round) {
				c, r := contenders[i], results[i]
				key := fmt.Sprintf("bench/h%d/%s/%d", w, c.Name, round)
				lat, err := handoff(ctx, c, w, cfg.Handoffs, cfg.Hold, key)
				if err != nil {
					return nil, fmt.Errorf("%s: handoff, %d waiters: %w", c.ID(), w, err)
				}
				r.handoff[w] = append(r.handoff[w], lat...)
			}
			logf("  round %d/%d done", round+1, rounds)
		}
	}

	for _, r := range results {
		n := float64(len(r.serial))
		r.Serial = summarize(r.serial)
		r.SerialRate = n / r.serialTime.Seconds()
		r.Parallel = summarize(r.parallel)
		r.ParallelRate = float64(r.parallelOps) / r.parallelTime.Seconds()
		r.Allocs = float64(r.mallocs) / n
		r.Bytes = float64(r.bytes) / n
		r.RoundTrips = float64(r.rt) / n
		r.ClientCPU = time.Duration(float64(r.cpu) / n)
		if r.srvTimeKnown {
			r.ServerTime = time.Duration(float64(r.srvTime) / n)
		}
		for w, lat := range r.handoff {
			r.Handoff[w] = summarize(lat)
		}
	}
	return results, nil
}

// turnOrder is the order in which n contenders take their turns in the
// given round: a shuffle, the same in every run. A fixed rotation would
// put every contender after the same one in every round, so that one
// whose turns leave the server busy (etcd syncing its log after eight
// clients, say) would slow the same contender every time: in a rotation
// over all the stores, fence on Redis followed etcd's raw floor, and its
// 1-client median came out well above what Redis measured alone gave
// (the analysis in docs/performance.md has the figures).
func turnOrder(n, round int) []int {
	return rand.New(rand.NewPCG(uint64(n), uint64(round))).Perm(n)
}

// uncontended runs clients goroutines, each doing ops acquire + release
// pairs on a key of its own, and returns the time of every pair.
func uncontended(ctx context.Context, cl Client, clients, ops int, key string) ([]time.Duration, error) {
	lat := make([]time.Duration, clients*ops)
	errs := make([]error, clients)
	var wg sync.WaitGroup
	for g := range clients {
		k := key
		if clients > 1 {
			k = fmt.Sprintf("%s/%d", key, g)
		}
		lk := cl.Locker()
		wg.Go(func() {
			defer closeLocker(lk)
			mine := lat[g*ops : (g+1)*ops]
			for j := range mine {
				start := time.Now()
				if err := lk.Lock(ctx, k); err != nil {
					errs[g] = fmt.Errorf("lock: %w", err)
					return
				}
				if err := lk.Unlock(ctx); err != nil {
					errs[g] = fmt.Errorf("unlock: %w", err)
					return
				}
				mine[j] = time.Since(start)
			}
		})
	}
	wg.Wait()
	return lat, errors.Join(errs...)
}

func closeLocker(lk Locker) {
	if c, ok := lk.(interface{ close() }); ok {
		c.close()
	}
}

// firstHold is how much longer the first holder of a handoff batch keeps
// the lock.
const firstHold = 100 * time.Millisecond

// handoff opens waiters+1 clients of c, as separate processes would, and
// lets them take key in turn until want handoffs were timed: the time from
// the moment a holder calls Unlock to the moment another's Lock returns.
// A holder keeps the lock until every other client is inside Lock and
// then for hold more (the first holder firstHold more again), so they all
// wait; after releasing it calls Lock
// again only once another holds the key, so that it never simply takes
// back the lock it released.
func handoff(ctx context.Context, c Contender, waiters, want int, hold time.Duration, key string) ([]time.Duration, error) {
	n := waiters + 1
	clients := make([]Client, 0, n)
	defer func() {
		for _, cl := range clients {
			_ = cl.Close()
		}
	}()
	rt := new(atomic.Int64)
	for range n {
		cl, err := c.Open(ctx, rt)
		if err != nil {
			return nil, fmt.Errorf("open: %w", err)
		}
		clients = append(clients, cl)
	}

	// Warm every client up first, as a long-running process would be: its
	// connections, sessions and prepared statements exist before the
	// handoffs start (fence on etcd, for one, grants its session lease on
	// its first acquisition).
	lockers := make([]Locker, n)
	for i, cl := range clients {
		lockers[i] = cl.Locker()
		if err := lockers[i].Lock(ctx, fmt.Sprintf("%s/warm/%d", key, i)); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
		if err := lockers[i].Unlock(ctx); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}

	limit := time.Minute + time.Duration(want)*(hold+time.Second)
	bctx, cancel := context.WithTimeoutCause(ctx, limit, errors.New("handoffs took too long"))
	defer cancel()
	var (
		mu       sync.Mutex
		lat      = make([]time.Duration, 0, want)
		last     = -1
		turn     = make(chan struct{}) // closed at every acquisition
		released atomic.Int64          // when the last Unlock was called, unix ns
		inLock   atomic.Int32
		errs     = make([]error, n)
		wg       sync.WaitGroup
	)
	for i, lk := range lockers {
		wg.Go(func() {
			defer closeLocker(lk)
			for {
				inLock.Add(1)
				err := lk.Lock(bctx, key)
				inLock.Add(-1)
				got := time.Now()
				if err != nil {
					if bctx.Err() == nil { // not the end of the batch
						errs[i] = fmt.Errorf("lock: %w", err)
						cancel()
					}
					return
				}
				mu.Lock()
				if r := released.Swap(0); r != 0 && last != i && len(lat) < want {
					lat = append(lat, got.Sub(time.Unix(0, r)))
				}
				firstHolder := last == -1
				last = i
				close(turn)
				turn = make(chan struct{})
				next := turn
				enough := len(lat) >= want
				mu.Unlock()
				if enough {
					cancel()
				}
				for inLock.Load() < int32(n-1) && bctx.Err() == nil {
					time.Sleep(100 * time.Microsecond)
				}
				if bctx.Err() == nil {
					if firstHolder {
						// The others have just called Lock: give every one
						// of them time to be waiting in earnest (for some
						// contenders that is several requests) before the
						// first handoff.
						time.Sleep(firstHold)
					}
					time.Sleep(hold)
				}
				released.Store(time.Now().UnixNano())
				uctx, ucancel := context.WithTimeout(context.Background(), 10*time.Second)
				err = lk.Unlock(uctx)
				ucancel()
				if err != nil {
					errs[i] = fmt.Errorf("unlock: %w", err)
					cancel()
					return
				}
				select {
				case <-next:
				case <-bctx.Done():
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return lat, err
	}
	if len(lat) < want {
		return lat, fmt.Errorf("only %d of %d handoffs: %v", len(lat), want, context.Cause(bctx))
	}
	return lat, nil
}

// processCPU is the user and system CPU time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
