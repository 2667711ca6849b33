package fence_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
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

func (tel *telemetry) options() []fence.Option {
	return []fence.Option{fence.WithMeterProvider(tel.mp), fence.WithTracerProvider(tel.tp)}
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
	ctx := ctxT(t)
	tel := newTelemetry(t)
	c := fence.New(fencemem.New(), append(tel.options(), fence.WithTTL(300*time.Millisecond))...)
	err := c.Run(ctx, "job", func(ctx context.Context, l *fence.Lease) error {
		if got := tel.sum(t, "fence.leases.held", storeMem); got != 1 {
			t.Errorf("leases held during Run = %d; want 1", got)
		}
		time.Sleep(250 * time.Millisecond) // two renewals at TTL/3
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
	s := tel.span(t, "fence.acquire", "acquired")
	if attrOf(s, "fence.key").AsString() != "job" || attrOf(s, "fence.token").AsInt64() != 1 {
		t.Errorf("acquire span attributes %v", s.Attributes())
	}
	tel.span(t, "fence.renew", "ok")
	tel.span(t, "fence.release", "ok")
}

func TestMetricsWaitAndHeld(t *testing.T) {
	ctx := ctxT(t)
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
}

func TestMetricsAndLogOnForcedLoss(t *testing.T) {
	ctx := ctxT(t)
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
	eventually(t, func() bool { return tel.sum(t, "fence.losses") == 1 && strings.Contains(logs.String(), "lease lost") })
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
	if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
		t.Fatal(err)
	}
	if got := tel.sum(t, "fence.leases.held"); got != 0 {
		t.Errorf("leases held after releasing a lost lease = %d; want 0", got)
	}
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

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestGuardMetricsCountRefusals(t *testing.T) {
	ctx := context.Background()
	tel := newTelemetry(t)
	g := fence.MemoryGuard{Metrics: fence.NewGuardMetrics(tel.mp, "memory")}
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

func TestWarnsWhenWorkRepeatedlyOutlastsTTL(t *testing.T) {
	ctx := ctxT(t)
	var logs syncBuffer
	c := fence.New(fencemem.New(), fence.WithTTL(60*time.Millisecond),
		fence.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	for i := range 2 {
		if err := c.Run(ctx, "slow", func(context.Context, *fence.Lease) error {
			time.Sleep(120 * time.Millisecond)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if i == 0 && strings.Contains(logs.String(), "longer than its TTL") {
			t.Errorf("warned after a single long hold")
		}
	}
	if !strings.Contains(logs.String(), "repeatedly held longer than its TTL") {
		t.Errorf("no warning after two holds longer than the TTL; logs:\n%s", logs.String())
	}
}
