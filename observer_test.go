package fence_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
	"github.com/fencing/fence/internal/testkit/obstest"
)

// eventNames names the types of events, in order.
func eventNames(events []any) []string {
	var names []string
	for _, e := range events {
		switch e.(type) {
		case fence.AcquireStart:
			names = append(names, "AcquireStart")
		case fence.WaitStart:
			names = append(names, "WaitStart")
		case fence.LeaseGranted:
			names = append(names, "LeaseGranted")
		case fence.AcquireEnd:
			names = append(names, "AcquireEnd")
		case fence.Renewed:
			names = append(names, "Renewed")
		case fence.LeaseEnded:
			names = append(names, "LeaseEnded")
		case fence.Released:
			names = append(names, "Released")
		case fence.GuardDecision:
			names = append(names, "GuardDecision")
		}
	}
	return names
}

// A lease's life reaches the observer as events, in order, with the
// lease's key, owner and token, and the store's name.
func TestObserverSeesALeaseLife(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		var rec obstest.Recorder
		c := fence.New(fencemem.New(), fence.WithObserver(&rec), fence.WithTTL(300*time.Millisecond))
		l, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(250 * time.Millisecond) // one renewal, at 100ms, and one at 200ms
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		want := []string{"AcquireStart", "LeaseGranted", "AcquireEnd", "Renewed", "Renewed", "LeaseEnded", "Released"}
		if got := eventNames(rec.Events()); !slices.Equal(got, want) {
			t.Fatalf("events %v; want %v", got, want)
		}
		start := obstest.Of[fence.AcquireStart](&rec)[0]
		if start.Store != "mem" || start.Key != "k" || start.Kind != fence.KindLock || start.Wait {
			t.Errorf("AcquireStart %+v", start)
		}
		g := obstest.Of[fence.LeaseGranted](&rec)[0]
		if g.Key != "k" || g.Owner != l.Owner() || g.Token != l.Token() || g.TTL != 300*time.Millisecond || !g.AcquiredAt.Equal(l.AcquiredAt()) {
			t.Errorf("LeaseGranted %+v; lease owner %q token %d", g, l.Owner(), l.Token())
		}
		end := obstest.Of[fence.AcquireEnd](&rec)[0]
		if end.Outcome != fence.OutcomeAcquired || end.Err != nil || end.Owner != l.Owner() || end.Token != l.Token() || end.Waiting {
			t.Errorf("AcquireEnd %+v", end)
		}
		for _, r := range obstest.Of[fence.Renewed](&rec) {
			if r.Outcome != fence.OutcomeOK || r.Err != nil || r.Token != l.Token() || r.Late {
				t.Errorf("Renewed %+v", r)
			}
		}
		ended := obstest.Of[fence.LeaseEnded](&rec)[0]
		if ended.Reason != "" || ended.Owner != l.Owner() || ended.Held != 250*time.Millisecond {
			t.Errorf("LeaseEnded %+v; want no reason, held 250ms", ended)
		}
		rel := obstest.Of[fence.Released](&rec)[0]
		if rel.Outcome != fence.OutcomeOK || rel.Err != nil || rel.Token != l.Token() || rel.TTL != 300*time.Millisecond {
			t.Errorf("Released %+v", rel)
		}

		// A second release of an ended lease reports nothing.
		rec.Reset()
		l.Release(ctx)
		if ev := rec.Events(); len(ev) != 0 {
			t.Errorf("a second Release reported %v", eventNames(ev))
		}
	})
}

// A wait is reported with the holder's token, and its duration at the
// end.
func TestObserverSeesAWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		var rec obstest.Recorder
		store := fencemem.New()
		holder := fence.New(store)
		l, err := holder.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		c := fence.New(store, fence.WithObserver(&rec))
		_, err = c.Acquire(ctx, "k", fence.WithWait(100*time.Millisecond))
		if !errors.Is(err, fence.ErrHeld) {
			t.Fatalf("Acquire = %v; want ErrHeld", err)
		}
		if got, want := eventNames(rec.Events()), []string{"AcquireStart", "WaitStart", "AcquireEnd"}; !slices.Equal(got, want) {
			t.Fatalf("events %v; want %v", got, want)
		}
		if w := obstest.Of[fence.WaitStart](&rec)[0]; w.HolderToken != l.Token() || w.Key != "k" {
			t.Errorf("WaitStart %+v; want holder token %d", w, l.Token())
		}
		end := obstest.Of[fence.AcquireEnd](&rec)[0]
		if end.Outcome != fence.OutcomeHeld || !errors.Is(end.Err, fence.ErrHeld) || !end.Waiting ||
			end.Waited != 100*time.Millisecond || end.Duration != 100*time.Millisecond || !end.Wait {
			t.Errorf("AcquireEnd %+v; want held after waiting 100ms", end)
		}

		rec.Reset()
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer cancel()
		if _, err := c.Acquire(cctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire = %v; want the context's deadline", err)
		}
		if end := obstest.Of[fence.AcquireEnd](&rec); len(end) != 1 || end[0].Outcome != fence.OutcomeCancelled {
			t.Errorf("AcquireEnd of a cancelled wait %+v", end)
		}
		rec.Reset()
		if _, err := c.TryAcquire(ctx, ""); !errors.Is(err, fence.ErrInvalidKey) {
			t.Fatal(err)
		}
		if end := obstest.Of[fence.AcquireEnd](&rec); len(end) != 1 || end[0].Outcome != fence.OutcomeInvalid {
			t.Errorf("AcquireEnd of an empty key %+v", end)
		}
	})
}

// Losses are reported once, with their reason, refused by the store or
// expired, and logged; a refused renewal is reported as such.
func TestObserverSeesLosses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		var rec obstest.Recorder
		var logs syncBuffer
		logger := fence.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))
		store := fencemem.New()
		c := fence.New(store, fence.WithObserver(&rec), fence.WithTTL(300*time.Millisecond), logger)
		l, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		store.Delete("k")
		waitDone(t, l, 5*time.Second)
		synctest.Wait()
		ended := obstest.Of[fence.LeaseEnded](&rec)
		if len(ended) != 1 || ended[0].Reason != fence.LossRefused || !errors.Is(ended[0].Err, fence.ErrNotHeld) {
			t.Errorf("LeaseEnded after a deletion %+v; want one, refused", ended)
		}
		if r := obstest.Of[fence.Renewed](&rec); len(r) != 1 || r[0].Outcome != fence.OutcomeRefused {
			t.Errorf("Renewed %+v; want one, refused", r)
		}
		if !strings.Contains(logs.String(), "lease lost") || !strings.Contains(logs.String(), "reason=refused") {
			t.Errorf("no loss log line with its cause; logs:\n%s", logs.String())
		}
		rec.Reset()
		if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
			t.Fatal(err)
		}
		if ev := rec.Events(); len(ev) != 0 {
			t.Errorf("releasing a lost lease reported %v", eventNames(ev))
		}

		// A loss found by the release.
		rec.Reset()
		l, err = c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		store.Delete("k")
		if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
			t.Fatal(err)
		}
		if e := obstest.Of[fence.LeaseEnded](&rec); len(e) != 1 || e[0].Reason != fence.LossRefused {
			t.Errorf("LeaseEnded of a loss found by Release %+v", e)
		}
		if r := obstest.Of[fence.Released](&rec); len(r) != 1 || r[0].Outcome != fence.OutcomeLost {
			t.Errorf("Released of a loss found by Release %+v", r)
		}

		// Expiry: the store stops answering.
		rec.Reset()
		h := newHooked()
		logs = syncBuffer{}
		c2 := fence.New(h, fence.WithObserver(&rec), fence.WithTTL(300*time.Millisecond), logger)
		l, err = c2.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		h.setExtend(func(context.Context, func() error) error { return errors.New("connection refused") })
		waitDone(t, l, 5*time.Second)
		synctest.Wait()
		if e := obstest.Of[fence.LeaseEnded](&rec); len(e) != 1 || e[0].Reason != fence.LossExpired {
			t.Errorf("LeaseEnded of an expiry %+v", e)
		}
		renewals := obstest.Of[fence.Renewed](&rec)
		if len(renewals) == 0 || renewals[0].Outcome != fence.OutcomeError {
			t.Errorf("Renewed of a failing store %+v; want errors", renewals)
		}
		for _, want := range []string{"renewal failed; retrying", "lease lost", "reason=expired"} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("no %q in the logs:\n%s", want, logs.String())
			}
		}
		l.Release(ctx)
	})
}

// A renewal that succeeds just before the validity ends is reported late,
// and logged.
func TestObserverSeesLateRenewals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		var rec obstest.Recorder
		var logs syncBuffer
		store := newHooked()
		// The store answers each renewal a twelfth of the TTL before the
		// validity ends: under the warning's sixth.
		const ttl = 1200 * time.Millisecond
		c := fence.New(store, fence.WithObserver(&rec), fence.WithTTL(ttl),
			fence.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		store.setExtend(func(ctx context.Context, next func() error) error {
			if dl, ok := ctx.Deadline(); ok {
				time.Sleep(time.Until(dl) - ttl/12)
			}
			return next()
		})
		l, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		time.Sleep(ttl)
		synctest.Wait()
		r := obstest.Of[fence.Renewed](&rec)
		if len(r) == 0 || !r[0].Late || r[0].Outcome != fence.OutcomeOK {
			t.Errorf("Renewed %+v; want a late success", r)
		}
		if !strings.Contains(logs.String(), "close to the end of the lease's validity") {
			t.Errorf("no warning of a late renewal; logs:\n%s", logs.String())
		}
	})
}

type ctxKey struct{}

// ctxObserver puts a value in the context of each acquisition.
type ctxObserver struct{ obstest.Recorder }

func (o *ctxObserver) AcquireStart(ctx context.Context, e fence.AcquireStart) context.Context {
	return context.WithValue(o.Recorder.AcquireStart(ctx, e), ctxKey{}, e.Key)
}

// The context AcquireStart returns is the one the driver is called with
// (the one a span would be in).
func TestObserverContextReachesTheDriver(t *testing.T) {
	ctx := ctxT(t)
	h := newHooked()
	var seen any
	h.acquireHook = func(ctx context.Context) error {
		seen = ctx.Value(ctxKey{})
		return nil
	}
	c := fence.New(h, fence.WithObserver(&ctxObserver{}))
	l, err := c.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	if seen != "k" {
		t.Errorf("the driver's context carries %v; want the observer's value", seen)
	}
}

// Observers combines observers: each sees every event, in turn, and the
// context goes through all of them.
func TestObservers(t *testing.T) {
	ctx := ctxT(t)
	if fence.Observers() != nil || fence.Observers(nil, nil) != nil {
		t.Error("Observers of nothing is not nil")
	}
	var a obstest.Recorder
	if fence.Observers(nil, &a) != &a {
		t.Error("Observers of one does not return it")
	}
	b := &ctxObserver{}
	h := newHooked()
	var seen any
	h.acquireHook = func(ctx context.Context) error {
		seen = ctx.Value(ctxKey{})
		return nil
	}
	c := fence.New(h, fence.WithObserver(fence.Observers(&a, b)))
	l, err := c.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
	want := []string{"AcquireStart", "LeaseGranted", "AcquireEnd", "LeaseEnded", "Released"}
	if got := eventNames(a.Events()); !slices.Equal(got, want) {
		t.Errorf("first observer's events %v; want %v", got, want)
	}
	if got := eventNames(b.Events()); !slices.Equal(got, want) {
		t.Errorf("second observer's events %v; want %v", got, want)
	}
	if seen != "k" {
		t.Errorf("the driver's context carries %v; want the second observer's value", seen)
	}
}

// WithStoreName names the store in events and logs; the default comes from
// the driver's package.
func TestWithStoreName(t *testing.T) {
	ctx := ctxT(t)
	var rec obstest.Recorder
	for _, tc := range []struct {
		opts []fence.ClientOption
		want string
	}{
		{nil, "mem"},
		{[]fence.ClientOption{fence.WithStoreName("primary")}, "primary"},
	} {
		rec.Reset()
		c := fence.New(fencemem.New(), append(tc.opts, fence.WithObserver(&rec))...)
		l, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		l.Release(ctx)
		for _, e := range rec.Events() {
			var store string
			switch e := e.(type) {
			case fence.AcquireStart:
				store = e.Store
			case fence.LeaseGranted:
				store = e.Store
			case fence.AcquireEnd:
				store = e.Store
			case fence.LeaseEnded:
				store = e.Store
			case fence.Released:
				store = e.Store
			}
			if store != tc.want {
				t.Errorf("%T names store %q; want %q", e, store, tc.want)
			}
		}
	}
}

// nopObserver does nothing.
type nopObserver struct{}

func (nopObserver) AcquireStart(ctx context.Context, _ fence.AcquireStart) context.Context {
	return ctx
}
func (nopObserver) WaitStart(context.Context, fence.WaitStart)       {}
func (nopObserver) LeaseGranted(context.Context, fence.LeaseGranted) {}
func (nopObserver) AcquireEnd(context.Context, fence.AcquireEnd)     {}
func (nopObserver) Renewed(context.Context, fence.Renewed)           {}
func (nopObserver) LeaseEnded(context.Context, fence.LeaseEnded)     {}
func (nopObserver) Released(context.Context, fence.Released)         {}

// Observation costs no allocation: an acquire and release allocate as
// much with an observer that does nothing as with none, so building and
// passing the events allocates nothing, and the default (no observer)
// skips even that.
func TestObserverAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	allocs := func(opts ...fence.ClientOption) float64 {
		c := fence.New(fencemem.New(), append(opts, fence.WithTTL(time.Minute))...)
		defer c.Close(ctx)
		return testing.AllocsPerRun(200, func() {
			l, err := c.TryAcquire(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
	none, nop := allocs(), allocs(fence.WithObserver(nopObserver{}))
	if nop != none {
		t.Errorf("an acquire and release allocate %v times with a no-op observer, %v without; want the same", nop, none)
	}
}

// BenchmarkAcquireReleaseObserved is BenchmarkAcquireRelease with an
// observer that does nothing: the cost of the events themselves.
func BenchmarkAcquireReleaseObserved(b *testing.B) {
	c := fence.New(fencemem.New(), fence.WithTTL(30*time.Second), fence.WithObserver(nopObserver{}))
	defer c.Close(context.Background())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := c.Acquire(ctx, "k")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func TestWarnsWhenWorkRepeatedlyOutlastsTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		var logs syncBuffer
		c := fence.New(fencemem.New(), fence.WithTTL(300*time.Millisecond), fence.WithStoreName("cache"),
			fence.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		for i := range 2 {
			if err := c.Run(ctx, "slow", func(context.Context, *fence.Lease) error {
				time.Sleep(500 * time.Millisecond)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if i == 0 && strings.Contains(logs.String(), "longer than its TTL") {
				t.Errorf("warned after a single long hold")
			}
		}
		if !strings.Contains(logs.String(), "repeatedly held longer than its TTL") || !strings.Contains(logs.String(), "store=cache") {
			t.Errorf("no warning after two holds longer than the TTL; logs:\n%s", logs.String())
		}
	})
}

// Holders say when they acquired the key: the granted attempt, not the
// start of the wait before it.
func TestHolderMetaSaysWhenAcquired(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := fencemem.New()
		c := fence.New(store)
		l, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(time.Second, func() { l.Release(ctx) })
		l2, err := c.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		defer l2.Release(ctx)
		h, err := c.Inspect(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		at, err := time.Parse(time.RFC3339Nano, h.Meta["acquired_at"])
		if err != nil {
			t.Fatalf("acquired_at %q: %v", h.Meta["acquired_at"], err)
		}
		if d := l2.AcquiredAt().Sub(at); d < 0 || d > 800*time.Millisecond {
			t.Errorf("acquired_at %v is %v before the grant; want the granted attempt's time", at, d)
		}
		if h.Meta["host"] == "" || h.Meta["pid"] == "" {
			t.Errorf("meta %v lacks host or pid", h.Meta)
		}
	})
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// A lease granted while its Client closes is released at once: its end
// and release are reported before the acquisition's end.
func TestObserverOrderWhenClosedDuringAcquire(t *testing.T) {
	ctx := ctxT(t)
	var rec obstest.Recorder
	h := newHooked()
	c := fence.New(h, fence.WithObserver(&rec))
	h.acquireHook = func(context.Context) error { return c.Close(ctx) }
	if _, err := c.TryAcquire(ctx, "k"); !errors.Is(err, fence.ErrClosed) {
		t.Fatalf("TryAcquire while closing = %v; want ErrClosed", err)
	}
	want := []string{"AcquireStart", "LeaseGranted", "LeaseEnded", "Released", "AcquireEnd"}
	if got := eventNames(rec.Events()); !slices.Equal(got, want) {
		t.Errorf("events %v; want %v", got, want)
	}
	if end := obstest.Of[fence.AcquireEnd](&rec); len(end) == 1 && end[0].Outcome != fence.OutcomeError {
		t.Errorf("AcquireEnd %+v; want outcome error", end[0])
	}
}
