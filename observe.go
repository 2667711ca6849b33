package fence

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// instrumentation is the name fence's meters and tracers carry.
const instrumentation = "github.com/fencing/fence"

// WithMeterProvider sets where fence's metrics go. The default is the
// global provider (otel.GetMeterProvider), which records nothing unless the
// application installs an SDK. Only New reads it.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider = mp }
}

// WithTracerProvider sets where fence's spans go. The default is the global
// provider (otel.GetTracerProvider), which records nothing unless the
// application installs an SDK. Only New reads it.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

// WithKeyAttribute makes the lock key an attribute of fence's metrics. Off
// by default: keys are unbounded, and each distinct key is a new time
// series. Spans always carry the key. Only New reads it.
func WithKeyAttribute() Option {
	return func(c *config) { c.keyAttribute = true }
}

// WithStoreName sets the store name fence's metrics, spans and logs carry.
// The default is derived from the driver's package: "redis" for
// fenceredis, "postgres" for fencepg. Only New reads it.
func WithStoreName(name string) Option {
	return func(c *config) { c.storeName = name }
}

// Outcomes of an acquisition, as the "outcome" metric attribute.
const (
	outcomeAcquired  = "acquired"
	outcomeHeld      = "held"
	outcomeCancelled = "cancelled"
	outcomeInvalid   = "invalid"
	outcomeError     = "error"
)

// observer records metrics, spans and the anti-pattern warnings for one
// Client.
type observer struct {
	store   attribute.KeyValue
	withKey bool
	tracer  trace.Tracer

	acquireDuration metric.Float64Histogram
	waitDuration    metric.Float64Histogram
	held            metric.Int64UpDownCounter
	renewals        metric.Int64Counter
	renewDuration   metric.Float64Histogram
	losses          metric.Int64Counter
	releases        metric.Int64Counter
	holdDuration    metric.Float64Histogram

	mu      sync.Mutex
	overrun map[string]int // leases held longer than their TTL, per key
}

// maxOverrunKeys bounds the memory spent on the long-hold warning.
const maxOverrunKeys = 1024

var secondsBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

func newObserver(drv Driver, cfg config) *observer {
	mp, tp := cfg.meterProvider, cfg.tracerProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	name := cfg.storeName
	if name == "" {
		name = storeName(drv)
	}
	m := mp.Meter(instrumentation)
	o := &observer{
		store:   attribute.String("fence.store", name),
		withKey: cfg.keyAttribute,
		tracer:  tp.Tracer(instrumentation),
		overrun: make(map[string]int),
	}
	// Instrument creation fails only for invalid names; fence's are fixed
	// and valid, and a failed instrument is a working no-op.
	o.acquireDuration, _ = m.Float64Histogram("fence.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time an Acquire or TryAcquire call took, waiting included, by outcome."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	o.waitDuration, _ = m.Float64Histogram("fence.acquire.wait", metric.WithUnit("s"),
		metric.WithDescription("Time an Acquire spent waiting for a held key, by outcome."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	o.held, _ = m.Int64UpDownCounter("fence.leases.held", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases held now."))
	o.renewals, _ = m.Int64Counter("fence.renewals", metric.WithUnit("{renewal}"),
		metric.WithDescription("Renewal attempts, by outcome (ok, refused, error)."))
	o.renewDuration, _ = m.Float64Histogram("fence.renew.duration", metric.WithUnit("s"),
		metric.WithDescription("Time a renewal round trip took."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	o.losses, _ = m.Int64Counter("fence.losses", metric.WithUnit("{lease}"),
		metric.WithDescription("Leases lost before release, by reason (refused, expired, session)."))
	o.releases, _ = m.Int64Counter("fence.releases", metric.WithUnit("{lease}"),
		metric.WithDescription("Releases, by outcome (ok, lost, error)."))
	o.holdDuration, _ = m.Float64Histogram("fence.lease.duration", metric.WithUnit("s"),
		metric.WithDescription("How long leases were held, from grant to release or loss."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	return o
}

// storeName derives a store name from the driver's package: fenceredis ->
// redis, fencepg -> postgres.
func storeName(drv Driver) string {
	t := reflect.TypeOf(drv)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	pkg := t.PkgPath()
	pkg = pkg[strings.LastIndex(pkg, "/")+1:]
	pkg = strings.TrimPrefix(pkg, "fence")
	switch pkg {
	case "pg":
		return "postgres"
	case "zk":
		return "zookeeper"
	case "":
		return "unknown"
	}
	return pkg
}

func (o *observer) attrs(key string, kv ...attribute.KeyValue) metric.MeasurementOption {
	set := append([]attribute.KeyValue{o.store}, kv...)
	if o.withKey {
		set = append(set, attribute.String("fence.key", key))
	}
	return metric.WithAttributes(set...)
}

func outcomeOf(err error) string {
	switch {
	case err == nil:
		return outcomeAcquired
	case errors.Is(err, ErrHeld):
		return outcomeHeld
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return outcomeCancelled
	case errors.Is(err, ErrInvalidKey), errors.Is(err, ErrInvalidTTL), errors.Is(err, ErrInvalidOption):
		return outcomeInvalid
	}
	return outcomeError
}

// startAcquire opens the acquire span.
func (o *observer) startAcquire(ctx context.Context, tgt target, wait bool) (context.Context, trace.Span) {
	return o.tracer.Start(ctx, "fence.acquire", trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(o.store, attribute.String("fence.key", tgt.key), attribute.Bool("fence.wait", wait),
			attribute.String("fence.kind", tgt.kind.String())))
}

// endAcquire records an acquisition's outcome. waited is the time spent
// waiting for a held key, zero if it never waited.
func (o *observer) endAcquire(ctx context.Context, span trace.Span, key string, l *Lease, err error, start time.Time, waited time.Duration) {
	outcome := attribute.String("outcome", outcomeOf(err))
	o.acquireDuration.Record(ctx, time.Since(start).Seconds(), o.attrs(key, outcome))
	if waited > 0 {
		o.waitDuration.Record(ctx, waited.Seconds(), o.attrs(key, outcome))
	}
	span.SetAttributes(attribute.String("fence.outcome", outcome.Value.AsString()))
	if l != nil {
		span.SetAttributes(attribute.Int64("fence.token", l.token), attribute.String("fence.owner", l.owner))
		o.held.Add(ctx, 1, o.attrs(key))
	}
	if err != nil && !errors.Is(err, ErrHeld) {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

func (o *observer) renewed(ctx context.Context, l *Lease, err error, start time.Time) {
	outcome := "ok"
	switch {
	case errors.Is(err, ErrNotHeld):
		outcome = "refused"
	case err != nil:
		outcome = "error"
	}
	took := time.Since(start)
	o.renewals.Add(ctx, 1, o.attrs(l.key, attribute.String("outcome", outcome)))
	o.renewDuration.Record(ctx, took.Seconds(), o.attrs(l.key, attribute.String("outcome", outcome)))
	_, span := o.tracer.Start(ctx, "fence.renew", trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(o.store, attribute.String("fence.key", l.key), attribute.Int64("fence.token", l.token),
			attribute.String("fence.outcome", outcome)))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// ended records a lease's end, by loss (reason) or release (reason "").
func (o *observer) ended(ctx context.Context, l *Lease, reason LossReason) {
	o.held.Add(ctx, -1, o.attrs(l.key))
	o.holdDuration.Record(ctx, time.Since(l.acquired).Seconds(), o.attrs(l.key))
	if reason != "" {
		o.losses.Add(ctx, 1, o.attrs(l.key, attribute.String("reason", string(reason))))
	}
}

func (o *observer) released(ctx context.Context, l *Lease, err error, start time.Time) {
	outcome := "ok"
	switch {
	case errors.Is(err, ErrLost):
		outcome = "lost"
	case err != nil:
		outcome = "error"
	}
	o.releases.Add(ctx, 1, o.attrs(l.key, attribute.String("outcome", outcome)))
	_, span := o.tracer.Start(ctx, "fence.release", trace.WithTimestamp(start), trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(o.store, attribute.String("fence.key", l.key), attribute.Int64("fence.token", l.token),
			attribute.String("fence.outcome", outcome)))
	if err != nil && outcome == "error" {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()

	// The "TTL shorter than the work" anti-pattern: renewal hides it until
	// a pause longer than the TTL lets a second holder in.
	held := time.Since(l.acquired)
	if held <= l.cfg.ttl {
		return
	}
	o.mu.Lock()
	n, known := o.overrun[l.key]
	if known || len(o.overrun) < maxOverrunKeys {
		n++
		o.overrun[l.key] = n
	}
	o.mu.Unlock()
	if n >= 2 {
		l.cfg.logger.Warn("fence: lease repeatedly held longer than its TTL; renewal kept it, but a pause longer than the TTL would let another holder in while this one works: use fencing tokens on every write, or a TTL longer than the work",
			"key", l.key, "held", held.Round(time.Millisecond), "ttl", l.cfg.ttl, "times", n, "store", o.store.Value.AsString())
	}
}

// GuardMetrics counts a guard's decisions: tokens admitted and stale
// tokens refused. Guards in fence's packages take one through their
// options; a nil *GuardMetrics counts nothing.
type GuardMetrics struct {
	guard    attribute.KeyValue
	admitted metric.Int64Counter
	refused  metric.Int64Counter
}

// NewGuardMetrics returns counters for the guard named guard (for example
// "sql", "redis", "http") on mp; nil mp means the global provider.
func NewGuardMetrics(mp metric.MeterProvider, guard string) *GuardMetrics {
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	m := mp.Meter(instrumentation)
	g := &GuardMetrics{guard: attribute.String("fence.guard", guard)}
	g.admitted, _ = m.Int64Counter("fence.guard.admitted", metric.WithUnit("{write}"),
		metric.WithDescription("Writes a guard admitted."))
	g.refused, _ = m.Int64Counter("fence.guard.refused", metric.WithUnit("{write}"),
		metric.WithDescription("Writes a guard refused for a stale token."))
	return g
}

// Record counts one decision: err nil is an admission, an error matching
// ErrStale a refusal; other errors are not counted.
func (g *GuardMetrics) Record(ctx context.Context, err error) {
	if g == nil {
		return
	}
	switch {
	case err == nil:
		g.admitted.Add(ctx, 1, metric.WithAttributes(g.guard))
	case errors.Is(err, ErrStale):
		g.refused.Add(ctx, 1, metric.WithAttributes(g.guard))
	}
}
