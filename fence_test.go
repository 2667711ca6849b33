package fence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencing/fence/internal/testkit/leakcheck"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
	"github.com/fencing/fence/internal/testkit/obstest"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// hooked wraps a fencemem.Store so tests can make the store slow, failing
// or forgetful at chosen moments.
type hooked struct {
	*fencemem.Store
	mu          sync.Mutex
	acquireHook func(ctx context.Context) error                    // before TryAcquire's store call
	replyDelay  time.Duration                                      // after TryAcquire's store call
	extendHook  func(ctx context.Context, next func() error) error // around Extend's store call, if set
	sessionLost chan error                                         // makes claims SessionClaims, reporting what it receives
	releases    atomic.Int32
}

func newHooked() *hooked { return &hooked{Store: fencemem.New()} }

func (h *hooked) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	h.mu.Lock()
	hook, delay := h.acquireHook, h.replyDelay
	h.mu.Unlock()
	if hook != nil {
		if err := hook(ctx); err != nil {
			return nil, err
		}
	}
	c, err := h.Store.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	time.Sleep(delay)
	hc := &hookedClaim{Claim: c, h: h}
	if h.sessionLost != nil {
		return &sessionClaim{hookedClaim: hc}, nil
	}
	return hc, nil
}

func (h *hooked) setExtend(f func(ctx context.Context, next func() error) error) {
	h.mu.Lock()
	h.extendHook = f
	h.mu.Unlock()
}

type hookedClaim struct {
	fence.Claim
	h *hooked
}

func (c *hookedClaim) Extend(ctx context.Context, ttl time.Duration) error {
	c.h.mu.Lock()
	hook := c.h.extendHook
	c.h.mu.Unlock()
	next := func() error { return c.Claim.Extend(ctx, ttl) }
	if hook != nil {
		return hook(ctx, next)
	}
	return next()
}

func (c *hookedClaim) Release(ctx context.Context) error {
	c.h.releases.Add(1)
	return c.Claim.Release(ctx)
}

// sessionClaim reports the loss of its session by calling the Client's
// function, from a goroutine of its own, as a driver's watch would.
type sessionClaim struct {
	*hookedClaim
	stop chan struct{}
	done chan struct{}
}

func (c *sessionClaim) NotifyLost(f func(error)) {
	c.stop, c.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(c.done)
		select {
		case err := <-c.h.sessionLost:
			f(err)
		case <-c.stop:
		}
	}()
}

func (c *sessionClaim) Release(ctx context.Context) error {
	close(c.stop)
	<-c.done
	return c.hookedClaim.Release(ctx)
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func waitDone(t *testing.T, l *fence.Lease, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case <-l.Done():
		return time.Since(start)
	case <-time.After(within):
		t.Fatalf("lease %q still valid after %v", l.Key(), within)
		return 0
	}
}

func lossReason(t *testing.T, l *fence.Lease) fence.LossReason {
	t.Helper()
	var lost *fence.LostError
	if !errors.As(l.Err(), &lost) {
		t.Fatalf("lease cause %v; want a *LostError", l.Err())
	}
	return lost.Reason
}

func TestUnreachableStoreLosesAtValidityEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		h := newHooked()
		c := fence.New(h, fence.WithTTL(600*time.Millisecond))
		sent := time.Now()
		l, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		// Every renewal now hangs until its context ends, as with a store that
		// accepts connections but never answers.
		var calls atomic.Int32
		h.setExtend(func(ctx context.Context, _ func() error) error {
			calls.Add(1)
			<-ctx.Done()
			return ctx.Err()
		})
		waitDone(t, l, 5*time.Second)
		lostAfter := time.Since(sent)
		if got := lossReason(t, l); got != fence.LossExpired {
			t.Errorf("reason %q; want %q", got, fence.LossExpired)
		}
		// Validity is TTL minus margin (2% + 5ms = 17ms) from the request.
		if lostAfter != 583*time.Millisecond {
			t.Errorf("lost %v after the acquire request; want at the validity end, 583ms", lostAfter)
		}
		if calls.Load() == 0 {
			t.Errorf("no renewal was attempted")
		}
		if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
			t.Errorf("Release after loss: %v; want ErrLost", err)
		}
	})
}

// A process resumed after a pause longer than the validity learns of the
// loss from Err at once, before the timer that ends the validity has run:
// Err reads the clock, and cancels the lease's context as the timer would.
func TestErrReportsValidityEndBeforeItsTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := fence.New(fencemem.New(), fence.WithTTL(time.Second))
		defer c.Close(context.Background())
		l, err := c.TryAcquire(t.Context(), "k")
		if err != nil {
			t.Fatal(err)
		}
		l.StopTimers() // the pause: no timer runs
		time.Sleep(900 * time.Millisecond)
		if err := l.Err(); err != nil {
			t.Fatalf("Err within the validity: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
		if got := lossReason(t, l); got != fence.LossExpired {
			t.Errorf("Err after the validity: reason %q; want %q", got, fence.LossExpired)
		}
		select {
		case <-l.Done():
		default:
			t.Error("Err reported the loss, but the lease's context is not cancelled")
		}
	})
}

func TestTransientRenewalFailuresAreRetried(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		h := newHooked()
		c := fence.New(h, fence.WithTTL(600*time.Millisecond))
		l, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		var failures atomic.Int32
		h.setExtend(func(ctx context.Context, next func() error) error {
			if failures.Add(1) <= 2 {
				return errors.New("connection reset")
			}
			return next()
		})
		time.Sleep(1500 * time.Millisecond)
		if err := l.Err(); err != nil {
			t.Fatalf("lease lost despite renewals succeeding after two failures: %v", err)
		}
		if failures.Load() < 3 {
			t.Errorf("%d renewal attempts; want retries after failures", failures.Load())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestRefusedRenewalLosesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		h := newHooked()
		c := fence.New(h, fence.WithTTL(3*time.Second), fence.WithRenewInterval(50*time.Millisecond))
		l, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		h.Delete("k")
		took := waitDone(t, l, 2*time.Second)
		if got := lossReason(t, l); got != fence.LossRefused {
			t.Errorf("reason %q; want %q", got, fence.LossRefused)
		}
		if took != 50*time.Millisecond {
			t.Errorf("loss noticed after %v; want at the next renewal (50ms)", took)
		}
		if !errors.Is(context.Cause(l.Context()), fence.ErrLost) {
			t.Errorf("context cause %v; want ErrLost", context.Cause(l.Context()))
		}
	})
}

func TestSessionLossLosesAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		h := newHooked()
		h.sessionLost = make(chan error, 1)
		c := fence.New(h, fence.WithTTL(10*time.Second), fence.WithoutRenewal())
		l, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		h.sessionLost <- errors.New("connection terminated by administrator")
		if took := waitDone(t, l, 2*time.Second); took != 0 {
			t.Errorf("loss noticed after %v; want at once", took)
		}
		if got := lossReason(t, l); got != fence.LossSession {
			t.Errorf("reason %q; want %q", got, fence.LossSession)
		}
		if !strings.Contains(l.Err().Error(), "terminated by administrator") {
			t.Errorf("cause %q does not carry the driver's error", l.Err())
		}
		if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
			t.Errorf("Release after the loss: %v; want ErrLost", err)
		}
		// A released lease whose driver reports a loss late stays
		// released.
		l2, err := c.TryAcquire(ctx, "k2")
		if err != nil {
			t.Fatal(err)
		}
		if err := l2.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(l2.Err(), fence.ErrReleased) {
			t.Errorf("released lease's cause %v; want ErrReleased", l2.Err())
		}
	})
}

// goneClaim is a session claim whose session is gone before the Client
// registers for its loss: the driver reports it at once, from NotifyLost.
type goneClaim struct{ fence.Claim }

func (goneClaim) NotifyLost(f func(error)) { f(errors.New("session gone before registration")) }

type goneStore struct{ *fencemem.Store }

func (s goneStore) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	c, err := s.Store.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return goneClaim{c}, nil
}

// A lease whose session is gone at the grant is lost at once, and the
// Client keeps nothing of it: Close, which reports only what its own
// releases find, has nothing to report.
func TestSessionGoneAtGrant(t *testing.T) {
	ctx := ctxT(t)
	c := fence.New(goneStore{fencemem.New()})
	l, err := c.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if got := lossReason(t, l); got != fence.LossSession {
		t.Errorf("reason %q; want %q", got, fence.LossSession)
	}
	if err := c.Close(ctx); err != nil {
		t.Errorf("Close after a lease lost at its grant: %v; want nil (the Client still listed the lost lease)", err)
	}
}

func TestLateAcquireReplyIsNeverHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		h := newHooked()
		h.replyDelay = 150 * time.Millisecond // longer than the TTL below
		c := fence.New(h, fence.WithTTL(100*time.Millisecond))
		l, err := c.TryAcquire(ctx, "k")
		if err == nil {
			t.Fatalf("TryAcquire whose reply came after the TTL returned a lease (token %d)", l.Token())
		}
		if !errors.Is(err, fence.ErrLost) {
			t.Errorf("TryAcquire with a late reply: %v; want ErrLost", err)
		}
		if h.releases.Load() != 1 {
			t.Errorf("the late claim was released %d times; want once", h.releases.Load())
		}
		// Acquire keeps trying until a reply comes in time.
		var n atomic.Int32
		h.mu.Lock()
		h.acquireHook = func(context.Context) error {
			if n.Add(1) > 2 {
				h.mu.Lock()
				h.replyDelay = 0 // takes effect from the next attempt
				h.mu.Unlock()
			}
			return nil
		}
		h.mu.Unlock()
		l, err = c.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if l.Token() < 3 {
			t.Errorf("token %d; the late grants should have used earlier tokens", l.Token())
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestWithoutRenewalAndManualRenew(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := fencemem.New()
		c := fence.New(store, fence.WithTTL(300*time.Millisecond), fence.WithoutRenewal())
		l, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		for range 4 {
			time.Sleep(150 * time.Millisecond)
			if err := l.Renew(ctx); err != nil {
				t.Fatalf("manual Renew: %v", err)
			}
		}
		if err := l.Err(); err != nil {
			t.Fatalf("manually renewed lease lost: %v", err)
		}
		waitDone(t, l, 2*time.Second)
		if got := lossReason(t, l); got != fence.LossExpired {
			t.Errorf("reason %q; want %q", got, fence.LossExpired)
		}
		if err := l.Renew(ctx); !errors.Is(err, fence.ErrLost) {
			t.Errorf("Renew after loss: %v; want ErrLost", err)
		}
	})
}

func TestAcquirePollingWakesAtReportedExpiry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := fencemem.New()
		// A driver without Watcher: waiting falls back to polling, which must
		// wake when the holder's lease expires rather than at a fixed step.
		drv := struct {
			fence.Driver
			fence.Inspector
		}{store, store}
		c := fence.New(drv, fence.WithTTL(400*time.Millisecond))
		l, err := c.TryAcquire(ctx, "k", fence.WithoutRenewal())
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		l2, err := c.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		// It wakes at the expiry the store reported, plus a millisecond.
		if took := time.Since(start); took != 401*time.Millisecond {
			t.Errorf("waiter took %v to get a key that expired after 400ms; want 401ms", took)
		}
		if l2.Token() <= l.Token() {
			t.Errorf("token %d after %d", l2.Token(), l.Token())
		}
		l2.Release(ctx)
		l.Release(ctx)
	})
}

func TestWaitTimeoutReportsHolder(t *testing.T) {
	ctx := ctxT(t)
	store := fencemem.New()
	c := fence.New(store)
	l, err := c.TryAcquire(ctx, "job", fence.WithOwner("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if !strings.HasPrefix(l.Owner(), "node-a-") || len(l.Owner()) != len("node-a-")+32 {
		t.Errorf("owner %q; want node-a- and 32 hex digits", l.Owner())
	}
	_, err = c.Acquire(ctx, "job", fence.WithWait(100*time.Millisecond))
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil {
		t.Fatalf("Acquire past its wait timeout: %v; want a *HeldError with the holder", err)
	}
	if held.Holder.Owner != l.Owner() || held.Holder.Token != l.Token() {
		t.Errorf("holder %+v; want owner %q token %d", held.Holder, l.Owner(), l.Token())
	}
	for _, want := range []string{`"job"`, l.Owner(), "token 1", "pid"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
}

// Owner ids never repeat, also when acquisitions run at once (each draws
// from a pool of random generators).
func TestOwnersAreUnique(t *testing.T) {
	ctx := ctxT(t)
	c := fence.New(fencemem.New())
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
		wg   sync.WaitGroup
	)
	for g := range 8 {
		wg.Go(func() {
			for range 200 {
				l, err := c.TryAcquire(ctx, fmt.Sprintf("k%d", g), fence.WithOwner("same"))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if seen[l.Owner()] {
					t.Errorf("owner %q issued twice", l.Owner())
				}
				seen[l.Owner()] = true
				mu.Unlock()
				l.Release(ctx)
			}
		})
	}
	wg.Wait()
	if len(seen) != 8*200 {
		t.Errorf("%d distinct owners; want %d", len(seen), 8*200)
	}
}

func TestBadOptions(t *testing.T) {
	ctx := ctxT(t)
	c := fence.New(fencemem.New())
	for name, opt := range map[string]fence.Option{
		"owner with newline":  fence.WithOwner("a\nb"),
		"long owner":          fence.WithOwner(strings.Repeat("o", 65)),
		"zero renew interval": fence.WithRenewInterval(0),
		"negative margin":     fence.WithDriftMargin(-time.Second),
	} {
		if _, err := c.TryAcquire(ctx, "k", opt); !errors.Is(err, fence.ErrInvalidOption) {
			t.Errorf("%s: %v; want ErrInvalidOption", name, err)
		}
	}
	run := func(context.Context, *fence.Lease) error {
		t.Error("Run with a bad option ran its function")
		return nil
	}
	if err := c.Run(ctx, "k", run, fence.HoldAtLeast(-time.Second)); !errors.Is(err, fence.ErrInvalidOption) {
		t.Errorf("negative hold: %v; want ErrInvalidOption", err)
	}
	if _, err := c.TryAcquire(ctx, "k", fence.WithTTL(time.Second), fence.WithDriftMargin(time.Second)); !errors.Is(err, fence.ErrInvalidTTL) {
		t.Errorf("margin as long as the TTL: %v; want ErrInvalidTTL", err)
	}
	if _, err := c.Inspect(ctx, "k"); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("after bad options the key is not free: %v", err)
	}
}

func TestCloseReleasesLeases(t *testing.T) {
	ctx := ctxT(t)
	store := fencemem.New()
	c := fence.New(store)
	var leases []*fence.Lease
	for _, k := range []string{"a", "b", "c"} {
		l, err := c.TryAcquire(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, l)
	}
	leases[0].Release(ctx)
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, l := range leases {
		if !errors.Is(l.Err(), fence.ErrReleased) {
			t.Errorf("lease %q after Close: %v; want ErrReleased", l.Key(), l.Err())
		}
	}
	if hs, _ := store.List(ctx, ""); len(hs) != 0 {
		t.Errorf("store still holds %v after Close", hs)
	}
	if _, err := c.TryAcquire(ctx, "d"); !errors.Is(err, fence.ErrClosed) {
		t.Errorf("TryAcquire after Close: %v; want ErrClosed", err)
	}
}

// Close reports a lease its release finds lost: the store no longer held
// it, and nothing had noticed before.
func TestCloseReportsLossFoundAtRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := fencemem.New()
		c := fence.New(store, fence.WithTTL(time.Hour))
		if _, err := c.TryAcquire(ctx, "kept"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryAcquire(ctx, "dropped"); err != nil {
			t.Fatal(err)
		}
		store.Delete("dropped")
		var lost *fence.LostError
		if err := c.Close(ctx); !errors.As(err, &lost) || lost.Key != "dropped" {
			t.Errorf("Close with a lease the store dropped: %v; want its *LostError", err)
		}
		if hs, _ := store.List(ctx, ""); len(hs) != 0 {
			t.Errorf("store still holds %v after Close", hs)
		}
	})
}

// A release that finds the lease lost says so again when repeated, and a
// lease released with its own context (or one made from it) is released
// in the store all the same.
func TestReleaseFoundLostStaysLost(t *testing.T) {
	ctx := ctxT(t)
	store := fencemem.New()
	c := fence.New(store, fence.WithTTL(time.Minute))
	l, err := c.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	store.Delete("k")
	first := l.Release(ctx)
	var lost *fence.LostError
	if !errors.As(first, &lost) || lost.Reason != fence.LossRefused {
		t.Fatalf("Release of a lease the store dropped: %v; want a *LostError (refused)", first)
	}
	if again := l.Release(ctx); again != first {
		t.Errorf("second Release: %v; want the same *LostError as the first", again)
	}

	l, err = c.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(l.Context()); err != nil {
		t.Errorf("Release(l.Context()): %v; want nil", err)
	}
	if _, err := store.Inspect(ctx, "k"); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("key still held after Release(l.Context()): %v", err)
	}
	if again := l.Release(ctx); !errors.Is(again, fence.ErrReleased) {
		t.Errorf("second Release of a released lease: %v; want ErrReleased", again)
	}
}

func TestLeaseContextCarriesValuesNotCancellation(t *testing.T) {
	type keyT struct{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), keyT{}, "v"))
	c := fence.New(fencemem.New())
	l, err := c.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if l.Context().Value(keyT{}) != "v" {
		t.Errorf("lease context lost the acquire context's values")
	}
	if l.Context().Err() != nil || l.Err() != nil {
		t.Errorf("cancelling the acquire context ended the lease: %v", l.Err())
	}
	if err := l.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestCancelledWaitLeavesNoWatch(t *testing.T) {
	store := fencemem.New()
	c := fence.New(store)
	ctx := ctxT(t)
	l, err := c.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := c.Acquire(wctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire with an expiring context: %v; want DeadlineExceeded", err)
	}
	l.Release(ctx)
	// leakcheck in TestMain checks that no watch goroutine is left.
}

// queued is a BlockingAcquirer whose store queue makes Acquire wait before
// granting, as a FIFO queue of contenders does.
type queued struct {
	*hooked
	wait time.Duration
}

// TryAcquire finds the key held: the grant comes only from the queue.
func (q *queued) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	return nil, &fence.HeldError{Key: req.Key}
}

func (q *queued) Acquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	select {
	case <-time.After(q.wait):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return q.hooked.TryAcquire(ctx, req)
}

func TestBlockingWaitLongerThanTTLIsConfirmedByExtend(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		q := &queued{hooked: newHooked(), wait: 300 * time.Millisecond}
		var extends atomic.Int32
		q.setExtend(func(ctx context.Context, next func() error) error {
			extends.Add(1)
			return next()
		})
		c := fence.New(q, fence.WithTTL(200*time.Millisecond))
		l, err := c.Acquire(ctx, "k")
		if err != nil {
			t.Fatalf("Acquire after a queued wait longer than the TTL: %v", err)
		}
		defer l.Release(ctx)
		if n := q.releases.Load(); n != 0 {
			t.Errorf("the grant was released %d times as late; want it confirmed by Extend", n)
		}
		if extends.Load() == 0 {
			t.Errorf("no Extend confirmed the grant of a long wait")
		}
		// TTL minus margin (2% + 5ms = 9ms), from the confirming Extend.
		if v := l.ValidFor(); v != 191*time.Millisecond {
			t.Errorf("ValidFor() = %v right after the grant; want 191ms, measured from the confirming Extend", v)
		}
		if l.Token() != 1 {
			t.Errorf("token %d; want 1 (one grant)", l.Token())
		}

		// A grant the store no longer holds by the time it is confirmed is
		// dropped, and the wait goes on.
		q2 := &queued{hooked: newHooked(), wait: 300 * time.Millisecond}
		var refused atomic.Bool
		q2.setExtend(func(ctx context.Context, next func() error) error {
			if refused.CompareAndSwap(false, true) {
				return fence.ErrNotHeld
			}
			return next()
		})
		c2 := fence.New(q2, fence.WithTTL(200*time.Millisecond))
		l2, err := c2.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if l2.Token() != 2 || q2.releases.Load() != 1 {
			t.Errorf("token %d after %d releases; want the refused grant released and a second grant (token 2)", l2.Token(), q2.releases.Load())
		}
		_ = l2.Release(ctx)
	})
}

// A call's options belong to that call's lease alone: a lease made with
// the Client's settings shares them, one made with its own keeps its own,
// and neither changes the other or the Client.
func TestCallOptionsStayWithTheirLease(t *testing.T) {
	ctx := context.Background()
	c := fence.New(fencemem.New(), fence.WithTTL(time.Minute), fence.WithMetadata(map[string]string{"team": "a"}))
	own, err := c.Acquire(ctx, "own", fence.WithTTL(2*time.Second), fence.WithMetadata(map[string]string{"job": "x"}))
	if err != nil {
		t.Fatal(err)
	}
	defer own.Release(ctx)
	shared, err := c.Acquire(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	defer shared.Release(ctx)
	if got := own.TTL(); got != 2*time.Second {
		t.Errorf("lease acquired WithTTL(2s): TTL %v", got)
	}
	if got := shared.TTL(); got != time.Minute {
		t.Errorf("lease acquired with the Client's settings: TTL %v, want the Client's 1m", got)
	}
	again, err := c.TryAcquire(ctx, "again")
	if err != nil {
		t.Fatal(err)
	}
	defer again.Release(ctx)
	if got := again.TTL(); got != time.Minute {
		t.Errorf("a later lease: TTL %v, want the Client's 1m (a call's option leaked into the Client)", got)
	}
	for key, want := range map[string]string{"own": "x", "again": ""} {
		h, err := c.Inspect(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if h.Meta["team"] != "a" || h.Meta["job"] != want {
			t.Errorf("%s: metadata %v; want team=a and job=%q (a call's metadata must not leak into the Client's)", key, h.Meta, want)
		}
	}
}

// skipping is a BlockingAcquirer over a fencemem.Store that reads the
// holder only when asked to, as a driver whose holder costs a read of its
// own does, and records what each try was asked.
type skipping struct {
	*fencemem.Store
	mu    sync.Mutex
	tries []bool // SkipHolder of each TryAcquire
	waits []bool // SkipHolder of each Acquire
}

func (s *skipping) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	s.mu.Lock()
	s.tries = append(s.tries, req.SkipHolder)
	s.mu.Unlock()
	c, err := s.Store.TryAcquire(ctx, req)
	var held *fence.HeldError
	if errors.As(err, &held) && req.SkipHolder {
		return nil, &fence.HeldError{Key: req.Key}
	}
	return c, err
}

// Acquire waits until ctx ends: the key never comes free in these tests.
func (s *skipping) Acquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	s.mu.Lock()
	s.waits = append(s.waits, req.SkipHolder)
	s.mu.Unlock()
	<-ctx.Done()
	return nil, ctx.Err()
}

func (s *skipping) asked() (tries, waits []bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tries, waits = s.tries, s.waits
	s.tries, s.waits = nil, nil
	return tries, waits
}

// A try that precedes a wait in a blocking driver does not ask for the
// holder, observed or not; a wait that times out still names the holder,
// read when it ends. A plain try and a polling driver's try still ask.
func TestWaitingTrySkipsTheHolder(t *testing.T) {
	ctx := ctxT(t)
	st := fencemem.New()
	holder := fence.New(st, fence.WithTTL(time.Minute))
	l, err := holder.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)

	checkHeld := func(what string, err error) {
		t.Helper()
		var held *fence.HeldError
		switch {
		case !errors.As(err, &held):
			t.Errorf("%s: %v; want a *HeldError", what, err)
		case held.Holder == nil:
			t.Errorf("%s: %v names no holder", what, err)
		case held.Holder.Owner != l.Owner() || held.Holder.Token != l.Token():
			t.Errorf("%s: holder owner %q token %d; want %q %d", what, held.Holder.Owner, held.Holder.Token, l.Owner(), l.Token())
		}
	}

	drv := &skipping{Store: st}
	c := fence.New(drv, fence.WithTTL(time.Minute))
	_, err = c.Acquire(ctx, "k", fence.WithWait(50*time.Millisecond))
	checkHeld("Acquire WithWait on a held key", err)
	if tries, waits := drv.asked(); !slices.Equal(tries, []bool{true}) || !slices.Equal(waits, []bool{false}) {
		t.Errorf("a waiting Acquire asked tries SkipHolder %v, waits %v; want [true], [false]", tries, waits)
	}

	_, err = c.TryAcquire(ctx, "k")
	checkHeld("TryAcquire on a held key", err)
	if tries, _ := drv.asked(); !slices.Equal(tries, []bool{false}) {
		t.Errorf("TryAcquire asked SkipHolder %v; want [false]", tries)
	}

	// Other kinds have no Inspect for the Client to read the holder with
	// when the wait times out: their tries still ask for it.
	w, err := holder.RWMutex("rw").AcquireWrite(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Release(ctx)
	if _, err := c.RWMutex("rw").AcquireWrite(ctx, fence.WithWait(50*time.Millisecond)); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("AcquireWrite WithWait on a held write lock: %v; want ErrHeld", err)
	}
	if tries, _ := drv.asked(); !slices.Equal(tries, []bool{false}) {
		t.Errorf("a waiting AcquireWrite asked SkipHolder %v; want [false]", tries)
	}

	// Observation does not change what the driver is asked.
	var rec obstest.Recorder
	traced := fence.New(drv, fence.WithTTL(time.Minute), fence.WithObserver(&rec))
	_, err = traced.Acquire(ctx, "k", fence.WithWait(50*time.Millisecond))
	checkHeld("observed Acquire WithWait on a held key", err)
	if tries, _ := drv.asked(); !slices.Equal(tries, []bool{true}) {
		t.Errorf("an observed waiting Acquire asked SkipHolder %v; want [true], as without an observer", tries)
	}
	if w := obstest.Of[fence.WaitStart](&rec); len(w) != 1 || w[0].HolderToken != 0 {
		t.Errorf("WaitStart %+v; want one, with no holder token (the try skipped the holder)", w)
	}

	// A polling driver sleeps until the holder's expiry: it needs the
	// holder from every try.
	polling := &pollingOnly{drv}
	p := fence.New(polling, fence.WithTTL(time.Minute))
	_, err = p.Acquire(ctx, "k", fence.WithWait(50*time.Millisecond))
	checkHeld("polling Acquire WithWait on a held key", err)
	if tries, _ := drv.asked(); len(tries) == 0 || slices.Contains(tries, true) {
		t.Errorf("a polling driver's tries asked SkipHolder %v; want all false", tries)
	}
}

// pollingOnly hides skipping's Acquire.
type pollingOnly struct{ s *skipping }

func (p *pollingOnly) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	return p.s.TryAcquire(ctx, req)
}

func (p *pollingOnly) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	return p.s.Inspect(ctx, key)
}
