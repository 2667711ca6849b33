package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencepg"
	"github.com/fencing/fence/fenceredis"
)

// holder keeps many leases alive at once, as one process would.
type holder interface {
	// take acquires every key; their renewal (fence's own, or the raw
	// floor's loop) runs from then on.
	take(ctx context.Context, keys []string) error
	// conns is the number of connections open to the store.
	conns() int
	// close releases every lease, stops the renewal and closes the
	// connections. It reports a lease lost while held.
	close(ctx context.Context) error
}

// Holding is one way of holding many leases on one store.
type Holding struct {
	Store, Name string
	Role        Role
	// Desc says what keeps the leases alive.
	Desc string
	// open connects one holder whose leases last ttl; rt counts its
	// round trips to the store.
	open func(ctx context.Context, rt *atomic.Int64, ttl time.Duration) (holder, error)
}

// ID is store/name.
func (h Holding) ID() string { return h.Store + "/" + h.Name }

// Holdings returns the ways of holding leases on the servers in srv,
// fence first within each store.
func Holdings(srv *Servers) []Holding {
	var hs []Holding
	if addr := srv.RedisAddr; addr != "" {
		hs = append(hs,
			Holding{Store: "redis", Name: "fence", Role: RoleFence,
				Desc: "a fence.Client on fenceredis holding N leases; the core renews them",
				open: func(ctx context.Context, rt *atomic.Int64, ttl time.Duration) (holder, error) {
					rdb := newRedis(addr, rt)
					st, err := fenceredis.New(rdb)
					if err != nil {
						rdb.Close()
						return nil, err
					}
					return &fenceHolder{c: fence.New(st, fence.WithTTL(ttl)),
						connsFn: func() int { return int(rdb.PoolStats().TotalConns) },
						closeFn: func() error { st.Close(); return rdb.Close() }}, nil
				}},
			Holding{Store: "redis", Name: "raw", Role: RoleRaw,
				Desc: "SET NX PX of every key in one pipeline, then every TTL/3 one pipeline of N EVALSHA (compare owner, PEXPIRE)",
				open: func(ctx context.Context, rt *atomic.Int64, ttl time.Duration) (holder, error) {
					rdb := newRedis(addr, rt)
					for _, s := range []*redis.Script{rawExtend, rawDrop} {
						if err := s.Load(ctx, rdb).Err(); err != nil {
							rdb.Close()
							return nil, err
						}
					}
					return &rawRedisHolder{rdb: rdb, ttl: ttl, owner: randomOwner()}, nil
				}})
	}
	if dsn := srv.PostgresDSN; dsn != "" {
		hs = append(hs,
			Holding{Store: "postgres", Name: "fence-lease", Role: RoleFence,
				Desc: "a fence.Client on fencepg lease mode holding N leases; the core renews them",
				open: func(ctx context.Context, rt *atomic.Int64, ttl time.Duration) (holder, error) {
					pool, err := newPool(ctx, dsn, rt)
					if err != nil {
						return nil, err
					}
					d, err := fencepg.NewLeaseStore(pool)
					if err != nil {
						pool.Close()
						return nil, err
					}
					return &fenceHolder{c: fence.New(d, fence.WithTTL(ttl)),
						connsFn: func() int { return int(pool.Stat().TotalConns()) },
						closeFn: func() error { err := d.Close(); pool.Close(); return err }}, nil
				}},
			Holding{Store: "postgres", Name: "raw-lease", Role: RoleRaw,
				Desc: "one INSERT .. SELECT FROM unnest($1) of every key, then every TTL/3 one UPDATE .. WHERE key = ANY($1) AND owner = $2",
				open: func(ctx context.Context, rt *atomic.Int64, ttl time.Duration) (holder, error) {
					pool, err := newPool(ctx, dsn, rt)
					if err != nil {
						return nil, err
					}
					return &rawPGHolder{pool: pool, ttl: ttl, owner: randomOwner()}, nil
				}})
	}
	return hs
}

func randomOwner() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// takeWorkers is how many goroutines acquire a fence holder's keys: a
// few, so that taking ten thousand leases takes seconds, not minutes,
// while the client opens few connections (each one counts in the
// renewal target's allowance).
const takeWorkers = 4

// fenceHolder is a fence.Client holding leases.
type fenceHolder struct {
	c       *fence.Client
	leases  []*fence.Lease
	connsFn func() int
	closeFn func() error
}

func (f *fenceHolder) take(ctx context.Context, keys []string) error {
	f.leases = make([]*fence.Lease, len(keys))
	var (
		next atomic.Int64
		errs = make([]error, takeWorkers)
		wg   sync.WaitGroup
	)
	for w := range takeWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(keys) || errs[w] != nil {
					return
				}
				f.leases[i], errs[w] = f.c.TryAcquire(ctx, keys[i])
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (f *fenceHolder) conns() int { return f.connsFn() }

func (f *fenceHolder) close(ctx context.Context) error {
	var (
		lost, next atomic.Int64
		errs       = make([]error, takeWorkers)
		wg         sync.WaitGroup
	)
	for w := range takeWorkers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= len(f.leases) {
					return
				}
				l := f.leases[i]
				if l == nil {
					continue
				}
				select {
				case <-l.Done():
					lost.Add(1)
				default:
				}
				if err := l.Release(ctx); err != nil && !errors.Is(err, fence.ErrLost) && errs[w] == nil {
					errs[w] = err
				}
			}
		})
	}
	wg.Wait()
	if n := lost.Load(); n > 0 {
		errs = append(errs, fmt.Errorf("%d of %d leases lost while held", n, len(f.leases)))
	}
	errs = append(errs, f.c.Close(ctx), f.closeFn())
	return errors.Join(errs...)
}

// The raw floor on Redis: the keys are taken in one pipeline and kept
// alive by one pipeline every TTL/3. No fencing tokens: a holder's
// renewal is what is measured.

// rawExtend: KEYS lock; ARGV owner, ttl ms. Reply: 1, or 0 if not ours.
var rawExtend = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
`)

// rawDrop: KEYS lock; ARGV owner. Reply: 1, or 0 if not ours.
var rawDrop = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// renewLoop calls renew every interval until stop is closed, and keeps
// its first error.
type renewLoop struct {
	stop chan struct{}
	done chan struct{}
	err  error
}

func startRenewLoop(interval time.Duration, renew func(context.Context) error) *renewLoop {
	r := &renewLoop{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-r.stop:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), interval)
			err := renew(ctx)
			cancel()
			if err != nil && r.err == nil {
				r.err = err
			}
		}
	}()
	return r
}

func (r *renewLoop) end() error {
	if r == nil {
		return nil
	}
	close(r.stop)
	<-r.done
	return r.err
}

type rawRedisHolder struct {
	rdb   *redis.Client
	ttl   time.Duration
	owner string
	keys  []string
	loop  *renewLoop
}

func (r *rawRedisHolder) take(ctx context.Context, keys []string) error {
	r.keys = keys
	cmds, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, k := range keys {
			p.SetNX(ctx, k, r.owner, r.ttl)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for i, c := range cmds {
		if ok, _ := c.(*redis.BoolCmd).Result(); !ok {
			return fmt.Errorf("raw redis: %s is held", keys[i])
		}
	}
	r.loop = startRenewLoop(r.ttl/3, r.each(rawExtend, r.ttl.Milliseconds()))
	return nil
}

// each runs script on every key in one pipeline and fails unless every
// key was still ours.
func (r *rawRedisHolder) each(script *redis.Script, args ...any) func(context.Context) error {
	return func(ctx context.Context) error {
		cmds, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range r.keys {
				script.EvalSha(ctx, p, []string{k}, append([]any{r.owner}, args...)...)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for i, c := range cmds {
			if n, _ := c.(*redis.Cmd).Int(); n != 1 {
				return fmt.Errorf("raw redis: %s was lost", r.keys[i])
			}
		}
		return nil
	}
}

func (r *rawRedisHolder) conns() int { return int(r.rdb.PoolStats().TotalConns) }

func (r *rawRedisHolder) close(ctx context.Context) error {
	err := r.loop.end()
	if r.keys != nil {
		err = errors.Join(err, r.each(rawDrop)(ctx))
	}
	return errors.Join(err, r.rdb.Close())
}

// The raw floor on PostgreSQL lease mode: one statement takes every key,
// one statement every TTL/3 extends them all.
const (
	rawHeldTake = `INSERT INTO raw_leases AS l (key, owner, token, expires_at)
		SELECT k, $2, ` + pgClock + `, clock_timestamp() + $3::bigint * interval '1 millisecond' FROM unnest($1::text[]) AS k
		ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, token = greatest(l.token + 1, ` + pgClock + `), expires_at = EXCLUDED.expires_at
		WHERE l.owner IS NULL OR l.expires_at <= clock_timestamp()`
	rawHeldExtend = `UPDATE raw_leases SET expires_at = clock_timestamp() + $3::bigint * interval '1 millisecond'
		WHERE key = ANY($1) AND owner = $2 AND expires_at > clock_timestamp()`
	rawHeldRelease = `UPDATE raw_leases SET owner = NULL WHERE key = ANY($1) AND owner = $2`
)

type rawPGHolder struct {
	pool  *pgxpool.Pool
	ttl   time.Duration
	owner string
	keys  []string
	loop  *renewLoop
}

func (r *rawPGHolder) take(ctx context.Context, keys []string) error {
	r.keys = keys
	if err := r.exec(ctx, rawHeldTake, r.ttl.Milliseconds()); err != nil {
		r.keys = nil
		return err
	}
	r.loop = startRenewLoop(r.ttl/3, func(ctx context.Context) error {
		return r.exec(ctx, rawHeldExtend, r.ttl.Milliseconds())
	})
	return nil
}

// exec runs one of the statements on every key and fails unless it
// touched every one.
func (r *rawPGHolder) exec(ctx context.Context, sql string, args ...any) error {
	tag, err := r.pool.Exec(ctx, sql, append([]any{r.keys, r.owner}, args...)...)
	if err != nil {
		return err
	}
	if n := tag.RowsAffected(); n != int64(len(r.keys)) {
		return fmt.Errorf("raw lease: %d of %d keys ours", n, len(r.keys))
	}
	return nil
}

func (r *rawPGHolder) conns() int { return int(r.pool.Stat().TotalConns()) }

func (r *rawPGHolder) close(ctx context.Context) error {
	err := r.loop.end()
	if r.keys != nil {
		err = errors.Join(err, r.exec(ctx, rawHeldRelease))
	}
	r.pool.Close()
	return err
}

// HeldResult is what one way of holding N leases measured.
type HeldResult struct {
	Holding Holding
	N       int
	// Window is how long the leases were held while measured; Renewals
	// is how many renew intervals (TTL/3) that is.
	Window   time.Duration
	Renewals float64
	// RoundTrips is the requests the client sent in the window.
	RoundTrips int64
	// Commands is the commands or statements the server ran in the
	// window (Redis: INFO commandstats, which counts those a script
	// calls too; PostgreSQL: pg_stat_statements), -1 where it cannot tell.
	Commands int64
	// CPU is the process's user and system time in the window.
	CPU time.Duration
	// HeapPerLease is the heap in use (after a GC) with the leases held,
	// less that before they were taken, per lease.
	HeapPerLease float64
	// Goroutines is the process's goroutines while holding, less those
	// before the holder was opened.
	Goroutines int
	// Conns is the connections to the store the holder had open.
	Conns int
	// Err, if not empty, says why holding failed (a lease lost while
	// held, say); the figures are then not measured.
	Err string
}

// RoundTripsPerSec is the round trips per second of the window.
func (h *HeldResult) RoundTripsPerSec() float64 { return float64(h.RoundTrips) / h.Window.Seconds() }

// CommandsPerSec is the server's commands per second of the window.
func (h *HeldResult) CommandsPerSec() float64 { return float64(h.Commands) / h.Window.Seconds() }

// CPUPerLease is the process's CPU time per held lease per second of the
// window, in µs.
func (h *HeldResult) CPUPerLease() float64 {
	return float64(h.CPU) / float64(time.Microsecond) / h.Window.Seconds() / float64(h.N)
}

// RoundTripsPerRenewal is the round trips per renew interval (TTL/3).
func (h *HeldResult) RoundTripsPerRenewal() float64 { return float64(h.RoundTrips) / h.Renewals }

// measureHeld has h hold n leases for cfg.HoldFor and measures it.
func measureHeld(ctx context.Context, srv *Servers, h Holding, n int, cfg ScaleConfig) (*HeldResult, error) {
	// The keys are the caller's, as a program's own names for its locks
	// would be: made before the heap is read, so not counted.
	keys := make([]string, n)
	prefix := fmt.Sprintf("bench/held/%s/%d/%s/", h.Name, n, randomOwner())
	for i := range keys {
		keys[i] = prefix + strconv.Itoa(i)
	}
	var m runtime.MemStats
	runtime.GC()
	g0 := runtime.NumGoroutine()
	runtime.ReadMemStats(&m)
	heap0 := m.HeapInuse

	rt := new(atomic.Int64)
	hd, err := h.open(ctx, rt, cfg.TTL)
	if err != nil {
		return nil, fmt.Errorf("open: %w", err)
	}
	if err := hd.take(ctx, keys); err != nil {
		return nil, errors.Join(fmt.Errorf("take %d: %w", n, err), hd.close(ctx))
	}
	runtime.GC()
	runtime.ReadMemStats(&m)
	r := &HeldResult{Holding: h, N: n, Goroutines: runtime.NumGoroutine() - g0,
		HeapPerLease: (float64(m.HeapInuse) - float64(heap0)) / float64(n)}

	cmd0, known0 := srv.commands(ctx, h.Store)
	rt0 := rt.Load()
	cpu0 := processCPU()
	start := time.Now()
	select {
	case <-time.After(cfg.HoldFor):
	case <-ctx.Done():
	}
	r.CPU = processCPU() - cpu0
	r.Window = time.Since(start)
	r.RoundTrips = rt.Load() - rt0
	cmd1, known1 := srv.commands(ctx, h.Store)
	r.Commands = -1
	if known0 && known1 {
		r.Commands = cmd1 - cmd0
	}
	r.Renewals = float64(r.Window) / float64(cfg.TTL/3)
	r.Conns = hd.conns()
	runtime.KeepAlive(keys)
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := errors.Join(ctx.Err(), hd.close(cctx)); err != nil {
		return nil, err
	}
	return r, nil
}
