package fencepg_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencepg"
)

// ExtendBatch extends each claim as its Extend would: a live claim, with
// or without a lock-delay, is extended; a claim whose lock another owner
// took is refused, the new holder untouched; a claim past its lease's end,
// in its lock-delay, is refused as its Extend refuses it, and its delay
// goes on blocking the key (the batch neither revives it nor moves its
// end).
func TestExtendBatch(t *testing.T) {
	ctx, d, pool := leaseStore(t)
	const short, long, delay = 300 * time.Millisecond, time.Minute, time.Minute
	acquire := func(key string, ttl, delay time.Duration) fence.Claim {
		t.Helper()
		c, err := d.TryAcquire(ctx, fence.Request{Key: key, Owner: "o-" + key, TTL: ttl, LockDelay: delay})
		if err != nil {
			t.Fatal(err)
		}
		if !d.Batchable(c) {
			t.Fatalf("claim %T of %q not batchable", c, key)
		}
		return c
	}
	expired := acquire("expired", short, delay)
	time.Sleep(2 * short) // past its end: in its lock-delay
	claims := []fence.Claim{
		acquire("a", long, 0),
		expired,
		acquire("stolen", long, 0),
		acquire("delayed", long, delay),
	}
	exec(t, pool, `UPDATE fence_locks SET owner = NULL WHERE key = 'stolen'`)
	thief, err := d.TryAcquire(ctx, fence.Request{Key: "stolen", Owner: "thief", TTL: short})
	if err != nil {
		t.Fatal(err)
	}
	defer thief.Release(ctx)

	errs := d.ExtendBatch(ctx, claims, []time.Duration{2 * long, 2 * long, 2 * long, 2 * long})
	if len(errs) != len(claims) || errs[0] != nil || !errors.Is(errs[1], fence.ErrNotHeld) ||
		!errors.Is(errs[2], fence.ErrNotHeld) || errs[3] != nil {
		t.Fatalf("ExtendBatch: %v; want nil, ErrNotHeld (in its lock-delay), ErrNotHeld (taken), nil", errs)
	}
	for _, key := range []string{"a", "delayed"} {
		h, err := d.Inspect(ctx, key)
		want := 2 * long
		if key == "delayed" {
			want += delay
		}
		if err != nil || h.ExpiresIn < want-5*time.Second {
			t.Errorf("%q after ExtendBatch by %v: free in %v (%v); want about %v", key, 2*long, h.ExpiresIn, err, want)
		}
	}
	if h, err := d.Inspect(ctx, "stolen"); err != nil || h.Owner != "thief" || h.ExpiresIn > short {
		t.Errorf("the new holder after a refused ExtendBatch: %+v, %v", h, err)
	}
	// The refused lease's end did not move: its key is free when its
	// delay, counted from its first end, runs out.
	if h, err := d.Inspect(ctx, "expired"); err != nil || h.Owner != "o-expired" || h.ExpiresIn > delay {
		t.Errorf("the lease in its lock-delay after a refused ExtendBatch: %+v, %v; want free within %v", h, err, delay)
	}
	if _, err := d.TryAcquire(ctx, fence.Request{Key: "expired", Owner: "other", TTL: short}); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("TryAcquire within the lock-delay of a lease refused in a batch: %v; want ErrHeld", err)
	}
	if err := expired.Extend(ctx, long); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Extend of the lease in its lock-delay: %v; want ErrNotHeld, as in the batch", err)
	}
	for _, i := range []int{0, 3} {
		if err := claims[i].Release(ctx); err != nil {
			t.Error(err)
		}
	}
}

// ExtendBatch sends its keys and owners as array literals: keys and
// owners with the literal's own syntax in them (quotes, backslashes,
// braces, commas, blanks, NULL) are each extended, not misread, and a
// claim that is not held among them is still refused.
func TestExtendBatchKeysOfAnyText(t *testing.T) {
	ctx, d, pool := leaseStore(t)
	keys := []string{`"`, `\`, `a\"b`, `{x,y}`, `, `, ` `, `NULL`, `"NULL"`, `é\\`, `tab	and
newline`, `plain`}
	var claims []fence.Claim
	var ttls []time.Duration
	for _, key := range keys {
		c, err := d.TryAcquire(ctx, fence.Request{Key: key, Owner: `o"\` + key, TTL: time.Minute})
		if err != nil {
			t.Fatalf("TryAcquire %q: %v", key, err)
		}
		claims = append(claims, c)
		ttls = append(ttls, time.Hour)
	}
	exec(t, pool, `UPDATE fence_locks SET owner = 'someone else' WHERE key = 'plain'`)
	errs := d.ExtendBatch(ctx, claims, ttls)
	for i, key := range keys {
		if key == "plain" {
			if !errors.Is(errs[i], fence.ErrNotHeld) {
				t.Errorf("%q, taken by another: %v; want ErrNotHeld", key, errs[i])
			}
			continue
		}
		if errs[i] != nil {
			t.Errorf("ExtendBatch of %q: %v", key, errs[i])
			continue
		}
		if h, err := d.Inspect(ctx, key); err != nil || h.ExpiresIn < time.Hour-time.Minute {
			t.Errorf("%q after ExtendBatch by an hour: %+v, %v", key, h, err)
		}
		if err := claims[i].Release(ctx); err != nil {
			t.Error(err)
		}
	}
	// A batch none of whose claims is held: no position comes back (a
	// NULL array), and each is refused.
	for i, err := range d.ExtendBatch(ctx, claims[:2], ttls[:2]) {
		if !errors.Is(err, fence.ErrNotHeld) {
			t.Errorf("ExtendBatch of released %q: %v; want ErrNotHeld", keys[i], err)
		}
	}
}

// leaseStore is a lease mode driver on a private server, closed with the
// test.
func leaseStore(t *testing.T) (context.Context, *fencepg.LeaseStore, *pgxpool.Pool) {
	_, pool := server(t)
	d, err := fencepg.NewLeaseStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return ctxFor(t), d, pool
}

// A batch whose call fails reports the failure for every claim in it,
// not a refusal.
func TestExtendBatchTransportError(t *testing.T) {
	srv, _ := server(t)
	ctx := ctxFor(t)
	pool, err := pgxpool.New(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	d, err := fencepg.NewLeaseStore(pool)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	var claims []fence.Claim
	for _, key := range []string{"a", "b"} {
		c, err := d.TryAcquire(ctx, fence.Request{Key: key, Owner: "o-" + key, TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		claims = append(claims, c)
	}
	pool.Close()
	errs := d.ExtendBatch(ctx, claims, []time.Duration{time.Minute, time.Minute})
	if len(errs) != 2 || errs[0] == nil || errs[1] == nil || errors.Is(errs[0], fence.ErrNotHeld) || errors.Is(errs[1], fence.ErrNotHeld) {
		t.Errorf("ExtendBatch through a closed pool: %v; want a transport error for each", errs)
	}
}

// roundTrips counts a pool's round trips: one per statement sent alone,
// one per pipeline (pgx.Batch).
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.n.Add(1)
	return ctx
}

func (*roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.n.Add(1)
	return ctx
}

func (*roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// onlyDriver hides every optional interface of a driver: the Client
// renews its leases one by one.
type onlyDriver struct{ fence.Driver }

// Renewals of many lease-mode leases in batches: round trips per renew
// interval within one per hundred leases plus the pool's connections.
// The figures, batched and one by one, are logged (go test -v).
func TestBatchRenewalRoundTrips(t *testing.T) {
	if testing.Short() {
		t.Skip("holds a thousand leases for several renew intervals")
	}
	const n = 1000
	const ttl = 3 * time.Second
	const intervals = 3
	srv, _ := server(t)
	for _, batched := range []bool{false, true} {
		ctx := ctxFor(t)
		cfg, err := pgxpool.ParseConfig(srv.DSN())
		if err != nil {
			t.Fatal(err)
		}
		var rt roundTrips
		cfg.ConnConfig.Tracer = &rt
		pool := poolFrom(t, cfg)
		d, err := fencepg.NewLeaseStore(pool)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		var drv fence.Driver = d
		if !batched {
			drv = onlyDriver{d}
		}
		c := fence.New(drv, fence.WithTTL(ttl))
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		leases := make([]*fence.Lease, n)
		for i := range leases {
			if leases[i], err = c.TryAcquire(ctx, "held/"+strconv.Itoa(i)); err != nil {
				t.Fatal(err)
			}
		}
		trips := rt.n.Load()
		time.Sleep(intervals * ttl / 3)
		trips = rt.n.Load() - trips
		for _, l := range leases {
			if err := l.Err(); err != nil {
				t.Fatalf("lease %q lost while held: %v", l.Key(), err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
		perInterval := float64(trips) / intervals
		t.Logf("batched=%v: %d leases, TTL %v, over %d renew intervals: %.1f round trips per interval",
			batched, n, ttl, intervals, perInterval)
		if bound := float64(n/100 + int(pool.Config().MaxConns)); batched && perInterval > bound {
			t.Errorf("%.1f round trips per renew interval for %d leases; want at most %.0f", perInterval, n, bound)
		}
	}
}
