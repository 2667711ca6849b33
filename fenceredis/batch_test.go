package fenceredis

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// ExtendBatch extends each claim as its Extend would, lock-delay
// included, refuses the one whose lock someone else took without
// touching the new holder, and reloads scripts the server lost.
func TestExtendBatch(t *testing.T) {
	onSingleAndCluster(t, func(t *testing.T, kind string, s *Store, r *raw) {
		ctx := testCtx(t)
		const short, long = time.Second, time.Minute
		req := func(key string, delay time.Duration) fence.Request {
			return fence.Request{Key: key, Owner: "o-" + key, TTL: short, LockDelay: delay}
		}
		var claims []fence.Claim
		for _, rq := range []fence.Request{req("a", 0), req("stolen", 0), req("delayed", time.Minute)} {
			c, err := s.TryAcquire(ctx, rq)
			if err != nil {
				t.Fatal(err)
			}
			claims = append(claims, c)
		}
		if err := r.deleteLock(ctx, "stolen"); err != nil {
			t.Fatal(err)
		}
		thief, err := s.TryAcquire(ctx, fence.Request{Key: "stolen", Owner: "thief", TTL: short})
		if err != nil {
			t.Fatal(err)
		}
		// Scripts the server lost: a batch before the flush has loaded
		// them, so the batch after it meets NOSCRIPT.
		if errs := s.ExtendBatch(ctx, claims[:1], []time.Duration{long}); errs[0] != nil {
			t.Fatal(errs[0])
		}
		for _, c := range r.cs {
			flush := func(ctx context.Context, n redis.Cmdable) error { return n.ScriptFlush(ctx).Err() }
			if cc, ok := c.(*redis.ClusterClient); ok {
				err = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return flush(ctx, n) })
			} else {
				err = flush(ctx, c)
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range claims {
			if !s.Batchable(c) {
				t.Fatalf("claim %T not batchable", c)
			}
		}
		errs := s.ExtendBatch(ctx, claims, []time.Duration{long, long, long})
		if len(errs) != 3 || errs[0] != nil || !errors.Is(errs[1], fence.ErrNotHeld) || errs[2] != nil {
			t.Fatalf("ExtendBatch: %v; want nil, ErrNotHeld, nil", errs)
		}
		for _, key := range []string{"a", "delayed"} {
			h, err := s.Inspect(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if h.ExpiresIn < long-5*time.Second {
				t.Errorf("%q expires in %v after ExtendBatch by %v", key, h.ExpiresIn, long)
			}
		}
		if h, err := s.Inspect(ctx, "stolen"); err != nil || h.Owner != "thief" || h.ExpiresIn > short {
			t.Errorf("the new holder after a refused ExtendBatch: %+v, %v", h, err)
		}
		// The delayed claim's end moved on too: its Extend succeeds,
		// and once expired in the store it is refused as alone.
		if err := claims[2].Extend(ctx, short); err != nil {
			t.Errorf("Extend of the delayed claim after ExtendBatch: %v", err)
		}
		time.Sleep(short + 100*time.Millisecond)
		errs = s.ExtendBatch(ctx, []fence.Claim{claims[0], claims[2]}, []time.Duration{short, short})
		if errs[0] != nil || !errors.Is(errs[1], fence.ErrNotHeld) {
			t.Errorf("ExtendBatch with the delayed lease's end passed: %v; want nil, ErrNotHeld", errs)
		}
		// Its lock-delay runs: the key stays blocked.
		if _, err := s.TryAcquire(ctx, fence.Request{Key: "delayed", Owner: "other", TTL: short}); !errors.Is(err, fence.ErrHeld) {
			t.Errorf("TryAcquire within the lock-delay of a lease extended in a batch: %v; want ErrHeld", err)
		}
		for _, c := range []fence.Claim{claims[0], thief} {
			_ = c.Release(ctx)
		}
	})
}

// The claims of one hash slot share a script in a batch, and each gets
// its own answer from it: a lock taken by another is refused, a lock
// whose name now holds another type fails, and the claims beside them
// are extended all the same. On a Cluster, keys of one slot share a
// script and keys of others do not.
func TestExtendBatchEachOnItsOwn(t *testing.T) {
	onSingleAndCluster(t, func(t *testing.T, kind string, s *Store, r *raw) {
		ctx := testCtx(t)
		const short, long = 5 * time.Second, time.Minute
		// Keys: a and b share a slot with stolen and wrong (found by
		// search), c has a slot of its own.
		slotOf := func(key string) uint16 { return crc16(hashed(lockNames(DefaultPrefix, key).lock)) % 16384 }
		keys := []string{"a"}
		for i := 0; len(keys) < 4; i++ {
			if k := "k" + strconv.Itoa(i); slotOf(k) == slotOf("a") {
				keys = append(keys, k)
			}
		}
		a, stolen, wrong, b := keys[0], keys[1], keys[2], keys[3]
		c := "c"
		if slotOf(c) == slotOf(a) {
			t.Fatal("c shares a's slot")
		}
		var claims []fence.Claim
		for _, key := range []string{a, stolen, c, wrong, b} {
			cl, err := s.TryAcquire(ctx, fence.Request{Key: key, Owner: "o-" + key, TTL: short})
			if err != nil {
				t.Fatal(err)
			}
			claims = append(claims, cl)
		}
		if err := r.deleteLock(ctx, stolen); err != nil {
			t.Fatal(err)
		}
		thief, err := s.TryAcquire(ctx, fence.Request{Key: stolen, Owner: "thief", TTL: short})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.deleteLock(ctx, wrong); err != nil {
			t.Fatal(err)
		}
		if err := r.cs[0].HSet(ctx, lockNames(DefaultPrefix, wrong).lock, "f", "v").Err(); err != nil {
			t.Fatal(err)
		}
		calls := s.batchCalls(claims, []time.Duration{long, long, long, long, long}, make([]error, len(claims)))
		want := 1
		if kind == "cluster" {
			want = 2
		}
		if len(calls) != want {
			t.Errorf("%d scripts for a batch of two slots; want %d", len(calls), want)
		}
		errs := s.ExtendBatch(ctx, claims, []time.Duration{long, long, long, long, long})
		for i, key := range []string{a, stolen, c, wrong, b} {
			err := errs[i]
			switch key {
			case stolen:
				if !errors.Is(err, fence.ErrNotHeld) {
					t.Errorf("%s (taken by another): %v; want ErrNotHeld", key, err)
				}
			case wrong:
				if err == nil || errors.Is(err, fence.ErrNotHeld) || !strings.Contains(err.Error(), "WRONGTYPE") {
					t.Errorf("%s (another type): %v; want the server's WRONGTYPE", key, err)
				}
			default:
				if err != nil {
					t.Errorf("%s: %v", key, err)
				}
				if h, err := s.Inspect(ctx, key); err != nil || h.ExpiresIn < long-5*time.Second {
					t.Errorf("%s after ExtendBatch by %v: %+v, %v", key, long, h, err)
				}
			}
		}
		if h, err := s.Inspect(ctx, stolen); err != nil || h.Owner != "thief" || h.ExpiresIn > short {
			t.Errorf("the new holder after a refused ExtendBatch: %+v, %v", h, err)
		}
		for _, cl := range []fence.Claim{claims[0], claims[2], claims[4], thief} {
			_ = cl.Release(ctx)
		}
		_ = r.cs[0].Del(ctx, lockNames(DefaultPrefix, wrong).lock).Err()
	})
}

// onSingleAndCluster runs f on a single server and on a Cluster of three
// masters, with a Store and raw access to the deployment's servers.
func onSingleAndCluster(t *testing.T, f func(t *testing.T, kind string, s *Store, r *raw)) {
	for _, tc := range []struct {
		kind    string
		connect func(t *testing.T) string
	}{
		{"single", func(t *testing.T) string { return connectSingle(testserver.Redis(t)) }},
		{"cluster", func(t *testing.T) string { return connectCluster(testserver.RedisCluster(t, 3)) }},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			connect := tc.connect(t)
			f(t, tc.kind, mustOpen(t, connect).(*Store), newRaw(t, connect))
		})
	}
}

// A batch whose connection fails reports the failure for every claim in
// it, not a refusal.
func TestExtendBatchTransportError(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	s := mustOpen(t, connectSingle(srv)).(*Store)
	c, err := s.TryAcquire(ctx, fence.Request{Key: "k", Owner: "o", TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	deadRdb := redis.NewClient(&redis.Options{Addr: closedAddr(t), MaxRetries: -1})
	defer deadRdb.Close()
	dead, err := New(deadRdb)
	if err != nil {
		t.Fatal(err)
	}
	defer dead.Close()
	c.(*claim).s = dead // the same claim, through a server that is gone
	errs := dead.ExtendBatch(ctx, []fence.Claim{c}, []time.Duration{time.Minute})
	c.(*claim).s = s
	_ = c.Release(ctx)
	if len(errs) != 1 || errs[0] == nil || errors.Is(errs[0], fence.ErrNotHeld) {
		t.Errorf("ExtendBatch through a closed port: %v; want a transport error", errs)
	}
}

func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// roundTrips counts a go-redis client's round trips: one per command
// sent alone, one per pipeline.
type roundTrips struct{ n atomic.Int64 }

func (*roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmd)
	}
}

func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.n.Add(1)
		return next(ctx, cmds)
	}
}

// onlyDriver hides every optional interface of a driver: the Client
// renews its leases one by one.
type onlyDriver struct{ fence.Driver }

// Renewals of many leases in batches: round trips per renew interval
// within one per hundred leases plus the client's connections. The
// figures, batched and one by one, are logged (go test -v).
func TestBatchRenewalRoundTrips(t *testing.T) {
	if testing.Short() {
		t.Skip("holds a thousand leases for several renew intervals")
	}
	const n = 1000
	const ttl = 3 * time.Second
	const intervals = 3
	srv := testserver.Redis(t)
	for _, batched := range []bool{false, true} {
		ctx := testCtx(t)
		rdb := newClient(srv.Addr())
		t.Cleanup(func() { rdb.Close() })
		var rt roundTrips
		rdb.AddHook(&rt)
		s, err := New(rdb)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		var drv fence.Driver = s
		if !batched {
			drv = onlyDriver{s}
		}
		c := mustClient(t, drv, fence.WithTTL(ttl))
		leases := make([]*fence.Lease, n)
		for i := range leases {
			if leases[i], err = c.TryAcquire(ctx, "held/"+strconv.Itoa(i)); err != nil {
				t.Fatal(err)
			}
		}
		statsRdb := newClient(srv.Addr())
		before := serverCommands(t, ctx, statsRdb)
		trips := rt.n.Load()
		time.Sleep(intervals * ttl / 3)
		trips = rt.n.Load() - trips
		cmds := serverCommands(t, ctx, statsRdb) - before
		statsRdb.Close()
		for _, l := range leases {
			if err := l.Err(); err != nil {
				t.Fatalf("lease %q lost while held: %v", l.Key(), err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		perInterval := float64(trips) / intervals
		t.Logf("batched=%v: %d leases, TTL %v, over %d renew intervals: %.1f round trips per interval, %.0f server commands/s",
			batched, n, ttl, intervals, perInterval, float64(cmds)/(intervals*(ttl/3)).Seconds())
		if bound := float64(n/100 + rdb.Options().PoolSize); batched && perInterval > bound {
			t.Errorf("%.1f round trips per renew interval for %d leases; want at most %.0f", perInterval, n, bound)
		}
	}
}

// serverCommands is the server's count of commands processed, scripts'
// own calls included.
func serverCommands(t *testing.T, ctx context.Context, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(ctx, "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(info) {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			v, _ := strconv.ParseInt(rest, 10, 64)
			return v
		}
	}
	t.Fatal("no total_commands_processed in INFO stats")
	return 0
}
