package fencetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence"
)

// The checks in this file call the driver directly, where the Client
// would hide a broken rule: its renewal makes up for a lease granted too
// short, its polling for a Watch that never fires, its validation for
// input a driver mishandles.

// driver opens a driver of its own, closed when the test ends.
func (s *suite) driver(t *testing.T) fence.Driver {
	t.Helper()
	drv, closeDrv, err := s.cfg.Open(s.store.Connect)
	if err != nil {
		t.Fatalf("Open(%q): %v", s.store.Connect, err)
	}
	if closeDrv != nil {
		t.Cleanup(func() {
			if err := closeDrv(); err != nil {
				t.Errorf("closing driver: %v", err)
			}
		})
	}
	return drv
}

// request returns a request for key of kind (a semaphore of one slot),
// with a fresh owner and the suite's TTL.
func (s *suite) request(key string, kind fence.Kind) fence.Request {
	r := fence.Request{Key: key, Owner: "fencetest-" + randomHex(16), TTL: s.cfg.TTL, Kind: kind,
		Meta: map[string]string{"check": "fencetest"}}
	if kind == fence.KindSemaphore {
		r.Limit = 1
	}
	return r
}

// grantOnce makes one driver-level attempt and, as the Client does, registers
// a loss function on a claim that takes one.
func grantOnce(ctx context.Context, drv fence.Driver, req fence.Request) (fence.Claim, error) {
	c, err := drv.TryAcquire(ctx, req)
	if err == nil {
		if sc, ok := c.(fence.SessionClaim); ok {
			sc.NotifyLost(func(error) {})
		}
	}
	return c, err
}

// kinds returns the kinds drv supports, KindLock first.
func kinds(drv fence.Driver) []fence.Kind {
	ks := []fence.Kind{fence.KindLock}
	if sup, ok := drv.(fence.KindSupporter); ok {
		for _, k := range []fence.Kind{fence.KindSemaphore, fence.KindRead, fence.KindWrite} {
			if sup.Supports(k) {
				ks = append(ks, k)
			}
		}
	}
	return ks
}

// blocker is the kind a holder takes so that a request of kind k is
// refused: a writer keeps a reader out; every other kind keeps out its
// own.
func blocker(k fence.Kind) fence.Kind {
	if k == fence.KindRead {
		return fence.KindWrite
	}
	return k
}

// acquireKind takes key in kind through the Client: a lock, a semaphore of
// one slot, or a side of a reader-writer lock. With wait it waits.
func acquireKind(ctx context.Context, c *fence.Client, key string, k fence.Kind, wait bool, opts ...fence.AcquireOption) (*fence.Lease, error) {
	switch k {
	case fence.KindSemaphore:
		if wait {
			return c.Semaphore(key, 1).Acquire(ctx, opts...)
		}
		return c.Semaphore(key, 1).TryAcquire(ctx, opts...)
	case fence.KindRead:
		if wait {
			return c.RWMutex(key).AcquireRead(ctx, opts...)
		}
		return c.RWMutex(key).TryAcquireRead(ctx, opts...)
	case fence.KindWrite:
		if wait {
			return c.RWMutex(key).AcquireWrite(ctx, opts...)
		}
		return c.RWMutex(key).TryAcquireWrite(ctx, opts...)
	}
	if wait {
		return c.Acquire(ctx, key, opts...)
	}
	return c.TryAcquire(ctx, key, opts...)
}

// tryNeverWaits checks, for every kind, that the driver's TryAcquire on a
// held key answers with a *HeldError instead of waiting for the key.
func (s *suite) tryNeverWaits(t *testing.T, ctx context.Context) {
	t.Helper()
	drv, holder := s.driver(t), s.driver(t)
	type result struct {
		kind    fence.Kind
		err     error
		elapsed time.Duration
	}
	ks := kinds(drv)
	results := make(chan result, len(ks))
	var claims []fence.Claim
	tokens := map[fence.Kind]int64{} // the holder's, by the kind refused
	for _, k := range ks {
		key := s.key(t, "driver-"+k.String())
		// The holder's TTL is long, where the driver takes it, so that the
		// key stays held however slow the try.
		req := s.request(key, blocker(k))
		req.TTL = 2 * s.slack()
		c, err := grantOnce(ctx, holder, req)
		if errors.Is(err, fence.ErrInvalidTTL) {
			c, err = grantOnce(ctx, holder, s.request(key, blocker(k)))
		}
		if err != nil {
			t.Fatalf("%s: driver TryAcquire of a free key: %v", blocker(k), err)
		}
		claims = append(claims, c)
		tokens[k] = c.Token()
		go func() {
			tctx, cancel := context.WithTimeout(ctx, s.slack())
			defer cancel()
			start := time.Now()
			c, err := drv.TryAcquire(tctx, s.request(key, k))
			if err == nil {
				_ = c.Release(ctx)
			}
			results <- result{k, err, time.Since(start)}
		}()
	}
	for range ks {
		r := <-results
		var held *fence.HeldError
		switch {
		case r.err == nil:
			t.Errorf("%s: driver TryAcquire granted a key held as %s, after %v", r.kind, blocker(r.kind), r.elapsed.Round(time.Millisecond))
		case !errors.As(r.err, &held):
			t.Errorf("%s: driver TryAcquire on a held key returned %v after %v; want a *HeldError at once: TryAcquire must never wait for the key",
				r.kind, r.err, r.elapsed.Round(time.Millisecond))
		case r.elapsed > s.slack():
			t.Errorf("%s: driver TryAcquire on a held key took %v; it must not wait", r.kind, r.elapsed)
		case held.Holder != nil && held.Holder.Token != tokens[r.kind]:
			t.Errorf("%s: refused naming the holder with token %d; the key is held as %s with token %d",
				r.kind, held.Holder.Token, blocker(r.kind), tokens[r.kind])
		}
	}
	for _, c := range claims {
		if err := c.Release(ctx); err != nil {
			t.Errorf("driver Release: %v", err)
		}
	}
	if t.Failed() {
		t.FailNow() // a TryAcquire that waits would hang the Client-level checks
	}
}

// ttlInStore checks, by observing the store, that a lease outlives its
// TTL from the grant or extend request: another owner's TryAcquire is
// refused until the TTL minus the Client's drift margin after the request
// was sent. The Client measures validity exactly so; a driver that grants
// or extends for less (half the TTL, or whole seconds rounded down) lets a
// second holder in while the first still counts itself valid, and the
// Client's renewals hide it everywhere else.
func (s *suite) ttlInStore(t *testing.T) {
	t.Run("Grant", func(t *testing.T) {
		t.Parallel()
		s.keptFor(t, false)
	})
	t.Run("Extend", func(t *testing.T) {
		t.Parallel()
		s.keptFor(t, true)
	})
}

func (s *suite) keptFor(t *testing.T, extend bool) {
	ctx := s.ctx(t)
	holder, other := s.driver(t), s.driver(t)
	key := s.key(t, "k")
	margin := s.cfg.TTL/50 + 5*time.Millisecond // the Client's default drift margin
	what := "grant"
	sent := time.Now()
	c, err := grantOnce(ctx, holder, s.request(key, fence.KindLock))
	if err != nil {
		t.Fatalf("driver TryAcquire: %v", err)
	}
	defer func() { _ = c.Release(ctx) }()
	if extend {
		what = "extend"
		time.Sleep(s.cfg.TTL / 3)
		sent = time.Now()
		if err := c.Extend(ctx, s.cfg.TTL); err != nil {
			t.Fatalf("Extend of a held lease: %v", err)
		}
	}
	until := sent.Add(s.cfg.TTL - margin)
	poll := max(s.cfg.TTL/20, 10*time.Millisecond)
	tries := 0
	for time.Now().Before(until) {
		tries++
		oc, err := other.TryAcquire(ctx, s.request(key, fence.KindLock))
		got := time.Now()
		if err == nil {
			_ = oc.Release(ctx)
			if got.Before(until) {
				t.Fatalf("another owner got the key %v after the %s request was sent, with TTL %v: the store must keep the lease at least the TTL minus the drift margin (%v) from the request (grant more, never less)",
					got.Sub(sent).Round(time.Millisecond), what, s.cfg.TTL, margin)
			}
			break
		}
		var held *fence.HeldError
		if !errors.As(err, &held) {
			t.Fatalf("driver TryAcquire of a held key: %v", err)
		}
		time.Sleep(poll)
	}
	t.Logf("the key stayed held for %d tries over %v after the %s request", tries, s.cfg.TTL-margin, what)
}

// watch checks a Watcher at the driver level, for every kind: after
// Watch returns, a release of the key puts a value on the channel within
// the slack. The Client's polling would hand the key over anyway, so only
// here does a Watch that never fires show.
func (s *suite) watch(t *testing.T) {
	drv := s.driver(t)
	w, ok := drv.(fence.Watcher)
	if !ok {
		t.Skip("driver does not implement fence.Watcher")
	}
	holder := s.driver(t)
	for _, k := range kinds(drv) {
		t.Run(k.String(), func(t *testing.T) {
			t.Parallel()
			ctx := s.ctx(t)
			key := s.key(t, "k")
			c, err := grantOnce(ctx, holder, s.request(key, k))
			if err != nil {
				t.Fatalf("driver TryAcquire: %v", err)
			}
			wctx, stop := context.WithCancel(ctx)
			defer stop()
			ch, err := w.Watch(wctx, key)
			if err != nil {
				_ = c.Release(ctx)
				t.Fatalf("Watch(%q): %v", key, err)
			}
			// Values before the release may come (a watch may wake for
			// nothing); they do not count.
		drain:
			for {
				select {
				case _, ok := <-ch:
					if !ok {
						_ = c.Release(ctx)
						t.Fatalf("the Watch channel closed while the watch's context lives")
					}
				default:
					break drain
				}
			}
			released := time.Now()
			if err := c.Release(ctx); err != nil {
				t.Fatalf("driver Release: %v", err)
			}
			select {
			case _, ok := <-ch:
				if !ok {
					t.Fatalf("the Watch channel closed instead of receiving the %s's release", k)
				}
				t.Logf("woken %v after the release", time.Since(released))
			case <-time.After(s.slack()):
				t.Errorf("no value on the Watch channel %v after the %s was released: a Watcher must report every release, in every kind it supports",
					s.slack(), k)
			}
		})
	}
}

// badInputDriver sends the driver requests it may not be able to honour:
// a TTL of an hour and 16 KiB of metadata. Each must be granted in full
// (Inspect, where it tells, shows the TTL and the metadata) or refused
// with a clear error (ErrInvalidTTL, ErrInvalidOption) that leaves the key
// free; never granted in part, never refused with the key left held.
func (s *suite) badInputDriver(t *testing.T, ctx context.Context) {
	t.Helper()
	drv, other := s.driver(t), s.driver(t)
	in, _ := drv.(fence.Inspector)
	const long = time.Hour
	big := strings.Repeat("m", 16<<10)
	cases := []struct {
		name string
		edit func(*fence.Request)
		want error
		ok   func(fence.Holder) bool
	}{
		{"TTL of an hour", func(r *fence.Request) { r.TTL = long }, fence.ErrInvalidTTL,
			func(h fence.Holder) bool {
				return s.cfg.SessionBound || h.ExpiresIn == 0 || h.ExpiresIn > long-time.Minute
			}},
		{"16 KiB of metadata", func(r *fence.Request) { r.Meta = map[string]string{"big": big} }, fence.ErrInvalidOption,
			func(h fence.Holder) bool { return h.Meta == nil || h.Meta["big"] == big }},
	}
	for i, tc := range cases {
		key := s.key(t, "driver-"+string(rune('a'+i)))
		req := s.request(key, fence.KindLock)
		tc.edit(&req)
		c, err := grantOnce(ctx, drv, req)
		if err == nil {
			if in != nil {
				h, err := in.Inspect(ctx, key)
				switch {
				case err != nil:
					t.Errorf("%s: granted, but Inspect: %v", tc.name, err)
				case h.Token != c.Token():
					t.Errorf("%s: granted token %d, but Inspect names token %d", tc.name, c.Token(), h.Token)
				case !tc.ok(h):
					t.Errorf("%s: granted, but only in part: Inspect shows ExpiresIn %v, metadata of %d bytes",
						tc.name, h.ExpiresIn, len(h.Meta["big"]))
				}
			}
			if err := c.Release(ctx); err != nil {
				t.Errorf("%s: Release: %v", tc.name, err)
			}
			continue
		}
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: refused with %v; want a grant, or an error matching %v", tc.name, err, tc.want)
		}
		t.Logf("%s: refused: %v", tc.name, err)
		c2, err := grantOnce(ctx, other, s.request(key, fence.KindLock))
		if err != nil {
			t.Errorf("%s: after the refusal, TryAcquire of the key: %v; a refused request must change nothing", tc.name, err)
			continue
		}
		if err := c2.Release(ctx); err != nil {
			t.Errorf("Release: %v", err)
		}
	}
}
