package fenceotel_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
	"github.com/fencing/fence/fenceotel"
)

type telemetry struct {
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
	mp     *sdkmetric.MeterProvider
	tp     *sdktrace.TracerProvider
}

func newTelemetry(t *testing.T) *telemetry {
	tel := &telemetry{reader: sdkmetric.NewManualReader(), spans: tracetest.NewSpanRecorder()}
	tel.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tel.reader))
	tel.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(tel.spans))
	t.Cleanup(func() {
		tel.mp.Shutdown(context.Background())
		tel.tp.Shutdown(context.Background())
	})
	return tel
}

// options returns the options of a Client observed by a fenceotel
// Observer on tel's providers, with opts.
func (tel *telemetry) options(opts ...fenceotel.Option) []fence.ClientOption {
	o := fenceotel.New(append([]fenceotel.Option{fenceotel.WithMeterProvider(tel.mp), fenceotel.WithTracerProvider(tel.tp)}, opts...)...)
	return []fence.ClientOption{fence.WithObserver(o)}
}

// sum returns the value of a counter (or the count of a histogram) over the
// data points whose attributes include every one of want.
func (tel *telemetry) sum(t *testing.T, name string, want ...attribute.KeyValue) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var total int64
	matches := func(set attribute.Set) bool {
		for _, kv := range want {
			if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
				return false
			}
		}
		return true
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, p := range d.DataPoints {
					if matches(p.Attributes) {
						total += p.Value
					}
				}
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if matches(p.Attributes) {
						total += int64(p.Count)
					}
				}
			}
		}
	}
	return total
}

// gauge returns the values of a float64 gauge by its "fence.key"
// attribute ("" without one).
func (tel *telemetry) gauge(t *testing.T, name string) map[string]float64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if g, ok := m.Data.(metricdata.Gauge[float64]); ok && m.Name == name {
				for _, p := range g.DataPoints {
					key, _ := p.Attributes.Value("fence.key")
					out[key.AsString()] = p.Value
				}
			}
		}
	}
	return out
}

func (tel *telemetry) span(t *testing.T, name, outcome string) sdktrace.ReadOnlySpan {
	t.Helper()
	for _, s := range tel.spans.Ended() {
		if s.Name() != name {
			continue
		}
		for _, kv := range s.Attributes() {
			if kv.Key == "fence.outcome" && kv.Value.AsString() == outcome {
				return s
			}
		}
	}
	t.Fatalf("no %s span with outcome %q among %d spans", name, outcome, len(tel.spans.Ended()))
	return nil
}

func attrOf(s sdktrace.ReadOnlySpan, key string) attribute.Value {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

var (
	storeMem = attribute.String("fence.store", "mem")
	acquired = attribute.String("outcome", "acquired")
	heldOut  = attribute.String("outcome", "held")
)

func TestMetricsAndSpansNormalRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		tel := newTelemetry(t)
		c := fence.New(fencemem.New(), append(tel.options(), fence.WithTTL(300*time.Millisecond))...)
		err := c.Run(ctx, "job", func(ctx context.Context, l *fence.Lease) error {
			if got := tel.sum(t, "fence.leases.held", storeMem); got != 1 {
				t.Errorf("leases held during Run = %d; want 1", got)
			}
			time.Sleep(250 * time.Millisecond) // two renewals at TTL/3
			if age := tel.gauge(t, "fence.lease.age")[""]; age < 0.2 {
				t.Errorf("fence.lease.age while held 250ms = %v; want >= 0.2", age)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := tel.sum(t, "fence.acquire.duration", storeMem, acquired); got != 1 {
			t.Errorf("acquisitions recorded = %d; want 1", got)
		}
		if got := tel.sum(t, "fence.leases.held", storeMem); got != 0 {
			t.Errorf("leases held after Run = %d; want 0", got)
		}
		if got := tel.sum(t, "fence.renewals", attribute.String("outcome", "ok")); got < 1 {
			t.Errorf("renewals recorded = %d; want at least 1", got)
		}
		if got := tel.sum(t, "fence.releases", attribute.String("outcome", "ok")); got != 1 {
			t.Errorf("releases recorded = %d; want 1", got)
		}
		if got := tel.sum(t, "fence.losses"); got != 0 {
			t.Errorf("losses recorded = %d; want 0", got)
		}
		if age := tel.gauge(t, "fence.lease.age"); age[""] != 0 {
			t.Errorf("fence.lease.age with no lease held = %v; want 0", age)
		}
		s := tel.span(t, "fence.acquire", "acquired")
		if attrOf(s, "fence.key").AsString() != "job" || attrOf(s, "fence.token").AsInt64() != 1 {
			t.Errorf("acquire span attributes %v", s.Attributes())
		}
		tel.span(t, "fence.renew", "ok")
		tel.span(t, "fence.release", "ok")
	})
}

func TestMetricsWaitAndHeld(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		tel := newTelemetry(t)
		store := fencemem.New()
		holder := fence.New(store)
		c := fence.New(store, tel.options()...)
		l, err := holder.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.TryAcquire(ctx, "k"); !errors.Is(err, fence.ErrHeld) {
			t.Fatal(err)
		}
		time.AfterFunc(100*time.Millisecond, func() { l.Release(ctx) })
		l2, err := c.Acquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		l2.Release(ctx)
		if got := tel.sum(t, "fence.acquire.duration", heldOut); got != 1 {
			t.Errorf("held outcomes = %d; want 1", got)
		}
		if got := tel.sum(t, "fence.acquire.wait", acquired); got != 1 {
			t.Errorf("waits recorded = %d; want 1 (the Acquire that waited)", got)
		}
		tel.span(t, "fence.acquire", "held")
	})
}

// A waiter shows in fence.acquire.waiting while it waits, and its acquire
// span says that it waited, on whom, and for how long.
func TestMetricsAndSpansOfAWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		tel := newTelemetry(t)
		store := fencemem.New()
		holder := fence.New(store)
		c := fence.New(store, tel.options()...)
		l, err := holder.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan *fence.Lease, 1)
		go func() {
			l2, err := c.Acquire(ctx, "k")
			if err != nil {
				t.Error(err)
			}
			got <- l2
		}()
		synctest.Wait() // the waiter waits
		if n := tel.sum(t, "fence.acquire.waiting", storeMem); n != 1 {
			t.Errorf("waiting while one Acquire waits = %d; want 1", n)
		}
		if n := tel.sum(t, "fence.acquire.duration"); n != 0 {
			t.Errorf("acquisitions recorded while still waiting = %d; want 0", n)
		}
		time.Sleep(100 * time.Millisecond)
		l.Release(ctx)
		l2 := <-got
		if l2 == nil {
			t.FailNow()
		}
		defer l2.Release(ctx)
		if n := tel.sum(t, "fence.acquire.waiting"); n != 0 {
			t.Errorf("waiting after the wait = %d; want 0", n)
		}
		if n := tel.sum(t, "fence.acquire.wait", storeMem, acquired); n != 1 {
			t.Errorf("waits recorded = %d; want 1", n)
		}
		if n := tel.sum(t, "fence.leases.held"); n != 1 {
			t.Errorf("leases held = %d; want 1", n)
		}
		s := tel.span(t, "fence.acquire", "acquired")
		if attrOf(s, "fence.token").AsInt64() != l2.Token() || !attrOf(s, "fence.wait").AsBool() {
			t.Errorf("acquire span attributes %v", s.Attributes())
		}
		if d := attrOf(s, "fence.wait.duration").AsFloat64(); d != 0.1 {
			t.Errorf("acquire span fence.wait.duration = %v; want 0.1", d)
		}
		var sawWait bool
		for _, e := range s.Events() {
			if e.Name == "fence.wait" {
				sawWait = true
				for _, kv := range e.Attributes {
					if kv.Key == "fence.holder.token" && kv.Value.AsInt64() != l.Token() {
						t.Errorf("wait event names holder token %d; want %d", kv.Value.AsInt64(), l.Token())
					}
				}
			}
		}
		if !sawWait {
			t.Errorf("acquire span has no fence.wait event: %v", s.Events())
		}
	})
}

// A wait that ends without the lease (its context cancelled) is counted
// as cancelled and leaves no waiter behind.
func TestMetricsOfACancelledWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		tel := newTelemetry(t)
		store := fencemem.New()
		l, err := fence.New(store).TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Release(ctx)
		c := fence.New(store, tel.options()...)
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		defer cancel()
		if _, err := c.Acquire(wctx, "k"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Acquire = %v; want the context's deadline", err)
		}
		cancelled := attribute.String("outcome", "cancelled")
		if n := tel.sum(t, "fence.acquire.wait", cancelled); n != 1 {
			t.Errorf("cancelled waits = %d; want 1", n)
		}
		if n := tel.sum(t, "fence.acquire.waiting"); n != 0 {
			t.Errorf("waiting after a cancelled wait = %d; want 0", n)
		}
		if s := tel.span(t, "fence.acquire", "cancelled"); s.Status().Code != codes.Error {
			t.Errorf("cancelled acquire span status = %v; want Error", s.Status())
		}
	})
}

func TestMetricsAndLogOnForcedLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		tel := newTelemetry(t)
		var logs syncBuffer
		store := fencemem.New()
		c := fence.New(store, append(tel.options(), fence.WithTTL(300*time.Millisecond),
			fence.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))...)
		l, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		store.Delete("k")
		waitDone(t, l, 5*time.Second)
		// The context is cancelled first; the records follow at once.
		synctest.Wait()
		if got := tel.sum(t, "fence.losses", attribute.String("reason", "refused")); got != 1 {
			t.Errorf("losses (refused) = %d; want 1", got)
		}
		if got := tel.sum(t, "fence.leases.held"); got != 0 {
			t.Errorf("leases held after loss = %d; want 0", got)
		}
		if got := tel.sum(t, "fence.renewals", attribute.String("outcome", "refused")); got != 1 {
			t.Errorf("refused renewals = %d; want 1", got)
		}
		if !strings.Contains(logs.String(), "lease lost") || !strings.Contains(logs.String(), "reason=refused") {
			t.Errorf("no loss log line with its cause; logs:\n%s", logs.String())
		}
		if got := tel.sum(t, "fence.lease.duration"); got != 1 {
			t.Errorf("lease durations recorded = %d; want 1", got)
		}
		s := tel.span(t, "fence.renew", "refused")
		if s.Status().Code != codes.Error || attrOf(s, "fence.token").AsInt64() != l.Token() {
			t.Errorf("refused renew span: status %v, attributes %v", s.Status(), s.Attributes())
		}
		if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
			t.Fatal(err)
		}
		if got := tel.sum(t, "fence.leases.held"); got != 0 {
			t.Errorf("leases held after releasing a lost lease = %d; want 0", got)
		}
	})
}

// A store that stops answering: renewals fail, are retried, and the lease
// is lost when its validity runs out (reason expired).
func TestMetricsAndLogOnExpiredLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		tel := newTelemetry(t)
		var logs syncBuffer
		store := newFailing()
		c := fence.New(store, append(tel.options(), fence.WithTTL(300*time.Millisecond),
			fence.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))...)
		l, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		store.setExtend(func(context.Context, func() error) error { return errors.New("connection refused") })
		waitDone(t, l, 5*time.Second)
		synctest.Wait()
		if got := tel.sum(t, "fence.losses"); got != 1 {
			t.Errorf("losses = %d; want 1", got)
		}
		if got := tel.sum(t, "fence.losses", attribute.String("reason", "expired")); got != 1 {
			t.Errorf("losses (expired) = %d; want 1", got)
		}
		if got := tel.sum(t, "fence.renewals", attribute.String("outcome", "error")); got < 1 {
			t.Errorf("failed renewals = %d; want at least 1", got)
		}
		if got := tel.sum(t, "fence.leases.held"); got != 0 {
			t.Errorf("leases held after loss = %d; want 0", got)
		}
		tel.span(t, "fence.renew", "error")
		for _, want := range []string{"renewal failed; retrying", "lease lost", "reason=expired"} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("no %q in the logs:\n%s", want, logs.String())
			}
		}
		l.Release(ctx)
	})
}

// A renewal that succeeds only just before the validity ends is logged.
func TestWarnsWhenRenewalIsCloseToDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		var logs syncBuffer
		store := newFailing()
		// The store answers each renewal a twelfth of the TTL before the
		// validity ends: under the warning's sixth.
		const ttl = 1200 * time.Millisecond
		tel := newTelemetry(t)
		c := fence.New(store, append(tel.options(), fence.WithTTL(ttl),
			fence.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))...)
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
		time.Sleep(ttl) // the first renewal (at ttl/3) ends ttl/12 before the validity does
		synctest.Wait()
		if !strings.Contains(logs.String(), "close to the end of the lease's validity") {
			t.Errorf("no warning of a late renewal; logs:\n%s", logs.String())
		}
		if n := tel.sum(t, "fence.renewals.late"); n < 1 {
			t.Errorf("late renewals counted = %d; want at least 1", n)
		}
	})
}

// With WithKeyAttribute, fence.lease.age is per key; Close stops it.
func TestLeaseAgeByKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		tel := newTelemetry(t)
		c := fence.New(fencemem.New(), tel.options(fenceotel.WithKeyAttribute())...)
		a, err := c.TryAcquire(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if _, err := c.TryAcquire(ctx, "b"); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
		age := tel.gauge(t, "fence.lease.age")
		if len(age) != 2 || age["a"] != 0.15 || age["b"] != 0.05 {
			t.Errorf("fence.lease.age by key = %v; want a 0.15s, b 0.05s", age)
		}
		a.Release(ctx)
		if age := tel.gauge(t, "fence.lease.age"); len(age) != 1 || age["b"] != 0.05 {
			t.Errorf("fence.lease.age after releasing a = %v; want b only, 0.05s", age)
		}
		if got := tel.sum(t, "fence.lease.duration", attribute.String("fence.key", "a")); got != 1 {
			t.Errorf("fence.lease.duration for a = %d; want 1", got)
		}
		c.Close(ctx)
		if age := tel.gauge(t, "fence.lease.age"); len(age) != 0 {
			t.Errorf("fence.lease.age after Close = %v; want nothing", age)
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

func TestGuardMetricsCountRefusals(t *testing.T) {
	ctx := context.Background()
	tel := newTelemetry(t)
	g := fence.MemoryGuard{Metrics: fenceotel.NewGuardMetrics("memory", fenceotel.WithMeterProvider(tel.mp))}
	g.Admit(ctx, "r", 2)
	g.Admit(ctx, "r", 2)
	g.Admit(ctx, "r", 1)
	g.Admit(ctx, "r", 0) // invalid: not counted
	guard := attribute.String("fence.guard", "memory")
	if got := tel.sum(t, "fence.guard.admitted", guard); got != 2 {
		t.Errorf("admitted = %d; want 2", got)
	}
	if got := tel.sum(t, "fence.guard.refused", guard); got != 1 {
		t.Errorf("refused = %d; want 1", got)
	}
}

// A stale write refused under the caller's span leaves an event there
// naming the token and the highest one admitted.
func TestGuardRefusalIsASpanEvent(t *testing.T) {
	tel := newTelemetry(t)
	g := fence.MemoryGuard{Metrics: fenceotel.NewGuardMetrics("memory", fenceotel.WithMeterProvider(tel.mp))}
	ctx, span := tel.tp.Tracer("test").Start(context.Background(), "write")
	if err := g.Admit(ctx, "r", 34); err != nil {
		t.Fatal(err)
	}
	if err := g.Admit(ctx, "r", 33); !errors.Is(err, fence.ErrStale) {
		t.Fatalf("Admit(33) after 34 = %v; want ErrStale", err)
	}
	span.End()
	var found bool
	for _, s := range tel.spans.Ended() {
		for _, e := range s.Events() {
			if e.Name != "fence.guard.refused" {
				continue
			}
			found = true
			got := map[string]int64{}
			for _, kv := range e.Attributes {
				if kv.Value.Type() == attribute.INT64 {
					got[string(kv.Key)] = kv.Value.AsInt64()
				}
			}
			if got["fence.token"] != 33 || got["fence.guard.highest"] != 34 {
				t.Errorf("refusal event attributes %v", e.Attributes)
			}
		}
	}
	if !found {
		t.Error("no fence.guard.refused event on the caller's span")
	}
	if got := tel.sum(t, "fence.guard.refused"); got != 1 {
		t.Errorf("refused = %d; want 1", got)
	}
}

// An Observer made before an SDK is installed as the global tracer and
// meter provider records nothing until then, and everything after: it
// must notice the SDK.
//
// otel's default global providers hand over to the first SDK installed,
// once per process, and no SDK can be uninstalled after: so the test runs
// in a process of its own, where no SDK was installed before it, also
// under go test -count=N, and leaves this process's globals alone.
func TestGlobalProvidersInstalledAfterNew(t *testing.T) {
	const env = "FENCE_TEST_GLOBAL_OTEL_CHILD"
	if os.Getenv(env) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^TestGlobalProvidersInstalledAfterNew$", "-test.count=1", "-test.v")
		// Without the race detector's one-second sleep at exit.
		cmd.Env = append(os.Environ(), env+"=1", "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestGlobalProvidersInstalledAfterNew") {
			t.Fatalf("in a process of its own: %v\n%s", err, out)
		}
		return
	}
	ctx := context.Background()
	c := fence.New(fencemem.New(), fence.WithTTL(10*time.Second), fence.WithObserver(fenceotel.New()))
	l, err := c.Acquire(ctx, "before")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	tel := newTelemetry(t)
	otel.SetTracerProvider(tel.tp)
	otel.SetMeterProvider(tel.mp)
	l, err = c.Acquire(ctx, "after")
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range tel.spans.Ended() {
		names = append(names, s.Name()+" "+attrOf(s, "fence.key").AsString())
	}
	if strings.Join(names, ",") != "fence.acquire after,fence.release after" {
		t.Errorf("spans %q; want the acquire and release of %q only", names, "after")
	}
	var rm metricdata.ResourceMetrics
	if err := tel.reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			found = found || m.Name == "fence.acquire.duration"
		}
	}
	if !found {
		t.Error("no fence.acquire.duration recorded through the global meter provider")
	}
}

// failing wraps a fencemem.Store so that tests can make its renewals slow
// or failing.
type failing struct {
	*fencemem.Store
	mu         sync.Mutex
	extendHook func(ctx context.Context, next func() error) error
}

func newFailing() *failing { return &failing{Store: fencemem.New()} }

func (f *failing) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	c, err := f.Store.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return &failingClaim{Claim: c, f: f}, nil
}

func (f *failing) setExtend(hook func(ctx context.Context, next func() error) error) {
	f.mu.Lock()
	f.extendHook = hook
	f.mu.Unlock()
}

type failingClaim struct {
	fence.Claim
	f *failing
}

func (c *failingClaim) Extend(ctx context.Context, ttl time.Duration) error {
	c.f.mu.Lock()
	hook := c.f.extendHook
	c.f.mu.Unlock()
	next := func() error { return c.Claim.Extend(ctx, ttl) }
	if hook != nil {
		return hook(ctx, next)
	}
	return next()
}

// waitDone waits until l is lost or released.
func waitDone(t *testing.T, l *fence.Lease, within time.Duration) {
	t.Helper()
	select {
	case <-l.Done():
	case <-time.After(within):
		t.Fatalf("lease %q not done within %v", l.Key(), within)
	}
}

// fence's spans are children of the caller's: the acquire and release of
// the span current in their calls, renewals of the one current when the
// lease was acquired. fenceotel never ends a span it did not start.
func TestSpansNestUnderTheCaller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		tel := newTelemetry(t)
		c := fence.New(fencemem.New(), append(tel.options(), fence.WithTTL(300*time.Millisecond))...)
		jobCtx, job := tel.tp.Tracer("test").Start(ctx, "job")
		l, err := c.Acquire(jobCtx, "k")
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(150 * time.Millisecond) // one renewal
		if err := l.Release(jobCtx); err != nil {
			t.Fatal(err)
		}
		if !job.IsRecording() {
			t.Fatal("the caller's span was ended by fence")
		}
		job.End()
		want := job.SpanContext().SpanID()
		seen := map[string]bool{}
		for _, s := range tel.spans.Ended() {
			if s.Name() == "job" {
				continue
			}
			seen[s.Name()] = true
			if s.Parent().SpanID() != want {
				t.Errorf("%s span's parent is %v; want the caller's span %v", s.Name(), s.Parent().SpanID(), want)
			}
		}
		for _, name := range []string{"fence.acquire", "fence.renew", "fence.release"} {
			if !seen[name] {
				t.Errorf("no %s span; saw %v", name, seen)
			}
		}
	})
}

// Combined with another observer, fenceotel's spans and gauges still
// work, whatever the other one puts in the context.
func TestCombinedWithAnotherObserver(t *testing.T) {
	ctx := context.Background()
	tel := newTelemetry(t)
	other := &spanningObserver{tracer: tel.tp.Tracer("other")}
	obs := fenceotel.New(fenceotel.WithMeterProvider(tel.mp), fenceotel.WithTracerProvider(tel.tp))
	c := fence.New(fencemem.New(), fence.WithObserver(fence.Observers(obs, other)))
	l, err := c.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if got := tel.sum(t, "fence.leases.held"); got != 1 {
		t.Errorf("leases held = %d; want 1", got)
	}
	l.Release(ctx)
	if got := tel.sum(t, "fence.leases.held"); got != 0 {
		t.Errorf("leases held after release = %d; want 0", got)
	}
	other.span.End()
	var names []string
	for _, s := range tel.spans.Ended() {
		names = append(names, s.Name())
	}
	if strings.Join(names, ",") != "fence.acquire,fence.release,other" {
		t.Errorf("spans ended %v; want fence.acquire, fence.release, then the other observer's", names)
	}
}

// spanningObserver starts a span of its own in AcquireStart and leaves
// it open.
type spanningObserver struct {
	tracer interface {
		Start(context.Context, string, ...trace.SpanStartOption) (context.Context, trace.Span)
	}
	span trace.Span
}

func (o *spanningObserver) AcquireStart(ctx context.Context, _ fence.AcquireStart) context.Context {
	ctx, o.span = o.tracer.Start(ctx, "other")
	return ctx
}
func (*spanningObserver) WaitStart(context.Context, fence.WaitStart)       {}
func (*spanningObserver) LeaseGranted(context.Context, fence.LeaseGranted) {}
func (*spanningObserver) AcquireEnd(context.Context, fence.AcquireEnd)     {}
func (*spanningObserver) Renewed(context.Context, fence.Renewed)           {}
func (*spanningObserver) LeaseEnded(context.Context, fence.LeaseEnded)     {}
func (*spanningObserver) Released(context.Context, fence.Released)         {}
