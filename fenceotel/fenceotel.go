// Package fenceotel reports what fence does as OpenTelemetry metrics and
// spans: a fence.Observer for Clients and a fence.GuardObserver for
// guards.
//
//	obs := fenceotel.New(fenceotel.WithMeterProvider(mp), fenceotel.WithTracerProvider(tp))
//	defer obs.Close()
//	client := fence.New(store, fence.WithObserver(obs))
//
// Without providers it uses the global ones (otel.GetMeterProvider,
// otel.GetTracerProvider), which record nothing until the application
// installs an SDK, and hand over to it once it does. The metrics, spans
// and their attributes are listed in docs/operating.md.
package fenceotel

import (
	"context"
	"errors"
	"sync"
	"time"
	"weak"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencing/fence"
)

// instrumentation is the name fence's meters and tracers carry (the
// otel_scope_name label in Prometheus): the library's, as it was before
// the instrumentation moved into this package.
const instrumentation = "github.com/fencing/fence"

// Option configures New and NewGuardMetrics.
type Option func(*config)

type config struct {
	mp      metric.MeterProvider
	tp      trace.TracerProvider
	withKey bool
}

// WithMeterProvider sets where the metrics go. The default is the global
// provider (otel.GetMeterProvider).
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.mp = mp }
}

// WithTracerProvider sets where the spans go. The default is the global
// provider (otel.GetTracerProvider).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tp = tp }
}

// WithKeyAttribute makes the lock key an attribute of the metrics. Off by
// default: keys are unbounded, and each distinct key is a new time series.
// Spans always carry the key.
func WithKeyAttribute() Option {
	return func(c *config) { c.withKey = true }
}

func newConfig(opts []Option) config {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.mp == nil {
		c.mp = otel.GetMeterProvider()
	}
	if c.tp == nil {
		c.tp = otel.GetTracerProvider()
	}
	return c
}

var secondsBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

// spanClient is the span kind option of every span, made once.
var spanClient = trace.WithSpanKind(trace.SpanKindClient)

// Observer is a fence.Observer recording metrics and spans. One Observer
// may serve several Clients; its gauges then sum theirs. Safe for
// concurrent use.
type Observer struct {
	withKey bool
	tracer  trace.Tracer

	acquireDuration metric.Float64Histogram
	waitDuration    metric.Float64Histogram
	waiting         metric.Int64UpDownCounter
	held            metric.Int64UpDownCounter
	renewals        metric.Int64Counter
	renewDuration   metric.Float64Histogram
	losses          metric.Int64Counter
	releases        metric.Int64Counter
	holdDuration    metric.Float64Histogram
	lateRenewals    metric.Int64Counter
	leaseAge        metric.Float64ObservableGauge
	ageReg          metric.Registration

	// leases are the leases held now, by owner id (unique per lease):
	// what the fence.lease.age gauge reports, and whether the
	// fence.leases.held gauge counted each.
	mu     sync.Mutex
	leases map[string]heldLease
	stores map[string]bool // every store a lease was held on

	attrs attrCache
}

type heldLease struct {
	store, key string
	acquired   time.Time
	counted    bool
}

var _ fence.Observer = (*Observer)(nil)

// New returns an Observer recording on the providers of opts. Close it
// when no Client uses it any more.
func New(opts ...Option) *Observer {
	cfg := newConfig(opts)
	m := cfg.mp.Meter(instrumentation)
	o := &Observer{
		withKey: cfg.withKey,
		tracer:  cfg.tp.Tracer(instrumentation),
		leases:  make(map[string]heldLease),
		stores:  make(map[string]bool),
	}
	o.attrs.withKey = cfg.withKey
	// Instrument creation fails only for invalid names; these are fixed
	// and valid, and a failed instrument is a working no-op.
	o.acquireDuration, _ = m.Float64Histogram("fence.acquire.duration", metric.WithUnit("s"),
		metric.WithDescription("Time an Acquire or TryAcquire call took, waiting included, by outcome."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	o.waitDuration, _ = m.Float64Histogram("fence.acquire.wait", metric.WithUnit("s"),
		metric.WithDescription("Time an Acquire spent waiting for a held key, by outcome."),
		metric.WithExplicitBucketBoundaries(secondsBuckets...))
	o.waiting, _ = m.Int64UpDownCounter("fence.acquire.waiting", metric.WithUnit("{waiter}"),
		metric.WithDescription("Acquire calls waiting for a held key now."))
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
	o.lateRenewals, _ = m.Int64Counter("fence.renewals.late", metric.WithUnit("{renewal}"),
		metric.WithDescription("Renewals that succeeded with less than a sixth of the TTL of validity left."))
	o.leaseAge, _ = m.Float64ObservableGauge("fence.lease.age", metric.WithUnit("s"),
		metric.WithDescription("Age of the oldest lease held now, 0 if none."))

	// The callback holds o weakly, so that an Observer dropped without
	// Close can still be collected.
	wo := weak.Make(o)
	o.ageReg, _ = m.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		if o := wo.Value(); o != nil {
			o.observeAges(obs)
		}
		return nil
	}, o.leaseAge)
	return o
}

// Close stops the fence.lease.age gauge. The other metrics and the spans
// keep working.
func (o *Observer) Close() error {
	if o.ageReg != nil {
		return o.ageReg.Unregister()
	}
	return nil
}

// observeAges reports the age of the oldest lease held, per store (and
// per key with WithKeyAttribute); without the key, 0 for a store whose
// leases all ended.
func (o *Observer) observeAges(obs metric.Observer) {
	type series struct{ store, key string }
	now := time.Now()
	oldest := map[series]time.Duration{}
	o.mu.Lock()
	for _, l := range o.leases {
		s := series{store: l.store}
		if o.withKey {
			s.key = l.key
		}
		oldest[s] = max(oldest[s], now.Sub(l.acquired))
	}
	if !o.withKey {
		for store := range o.stores {
			s := series{store: store}
			oldest[s] = max(oldest[s], 0)
		}
	}
	o.mu.Unlock()
	for s, age := range oldest {
		obs.ObserveFloat64(o.leaseAge, age.Seconds(), o.attrs.get(s.store, s.key))
	}
}

// acquisition is what an acquisition's events share, in its context.
type acquisition struct {
	span        trace.Span
	waitCounted bool // fence.acquire.waiting counted this call's wait
}

type acquisitionKey struct{}

// AcquireStart implements fence.Observer: it starts the fence.acquire
// span. Its attributes are set only if the span records.
func (o *Observer) AcquireStart(ctx context.Context, e fence.AcquireStart) context.Context {
	ctx, span := o.tracer.Start(ctx, "fence.acquire", trace.WithTimestamp(e.Start), spanClient)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("fence.store", e.Store), attribute.String("fence.key", e.Key),
			attribute.Bool("fence.wait", e.Wait), attribute.String("fence.kind", e.Kind.String()))
	}
	return context.WithValue(ctx, acquisitionKey{}, &acquisition{span: span})
}

func acquisitionOf(ctx context.Context) *acquisition {
	a, _ := ctx.Value(acquisitionKey{}).(*acquisition)
	return a
}

// WaitStart implements fence.Observer.
func (o *Observer) WaitStart(ctx context.Context, e fence.WaitStart) {
	a := acquisitionOf(ctx)
	if a == nil {
		return
	}
	// Both ends of the gauge or neither, even if a provider is installed
	// meanwhile.
	if o.waiting.Enabled(ctx) {
		a.waitCounted = true
		o.waiting.Add(ctx, 1, o.attrs.get(e.Store, e.Key))
	}
	if a.span.IsRecording() {
		var attrs []attribute.KeyValue
		if e.HolderToken > 0 {
			attrs = append(attrs, attribute.Int64("fence.holder.token", e.HolderToken))
		}
		a.span.AddEvent("fence.wait", trace.WithAttributes(attrs...))
	}
}

// LeaseGranted implements fence.Observer.
func (o *Observer) LeaseGranted(ctx context.Context, e fence.LeaseGranted) {
	l := heldLease{store: e.Store, key: e.Key, acquired: e.AcquiredAt}
	if o.held.Enabled(ctx) {
		l.counted = true
		o.held.Add(ctx, 1, o.attrs.get(e.Store, e.Key))
	}
	o.mu.Lock()
	o.leases[e.Owner] = l
	o.stores[e.Store] = true
	o.mu.Unlock()
}

// AcquireEnd implements fence.Observer.
func (o *Observer) AcquireEnd(ctx context.Context, e fence.AcquireEnd) {
	if o.acquireDuration.Enabled(ctx) || (e.Waiting && o.waitDuration.Enabled(ctx)) {
		opt := o.attrs.get(e.Store, e.Key, attribute.String("outcome", e.Outcome))
		o.acquireDuration.Record(ctx, e.Duration.Seconds(), opt)
		if e.Waiting {
			o.waitDuration.Record(ctx, e.Waited.Seconds(), opt)
		}
	}
	a := acquisitionOf(ctx)
	if a == nil {
		return
	}
	if a.waitCounted {
		o.waiting.Add(ctx, -1, o.attrs.get(e.Store, e.Key))
	}
	if span := a.span; span.IsRecording() {
		span.SetAttributes(attribute.String("fence.outcome", e.Outcome))
		if e.Waiting {
			span.SetAttributes(attribute.Float64("fence.wait.duration", e.Waited.Seconds()))
		}
		if e.Token > 0 {
			span.SetAttributes(attribute.Int64("fence.token", e.Token), attribute.String("fence.owner", e.Owner))
		}
		if e.Err != nil && e.Outcome != fence.OutcomeHeld {
			span.RecordError(e.Err)
			span.SetStatus(codes.Error, e.Err.Error())
		}
	}
	a.span.End()
}

// Renewed implements fence.Observer. The fence.renew span is a child of
// the span current when the lease was acquired.
func (o *Observer) Renewed(ctx context.Context, e fence.Renewed) {
	if o.renewals.Enabled(ctx) || o.renewDuration.Enabled(ctx) {
		opt := o.attrs.get(e.Store, e.Key, attribute.String("outcome", e.Outcome))
		o.renewals.Add(ctx, 1, opt)
		o.renewDuration.Record(ctx, e.Duration.Seconds(), opt)
	}
	if e.Late {
		o.lateRenewals.Add(ctx, 1, o.attrs.get(e.Store, e.Key))
	}
	_, span := o.tracer.Start(ctx, "fence.renew", trace.WithTimestamp(e.Start), spanClient)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("fence.store", e.Store), attribute.String("fence.key", e.Key),
			attribute.Int64("fence.token", e.Token), attribute.String("fence.outcome", e.Outcome))
		if e.Err != nil {
			span.RecordError(e.Err)
			span.SetStatus(codes.Error, e.Err.Error())
		}
	}
	span.End(trace.WithTimestamp(e.Start.Add(e.Duration)))
}

// LeaseEnded implements fence.Observer.
func (o *Observer) LeaseEnded(ctx context.Context, e fence.LeaseEnded) {
	o.mu.Lock()
	l, ok := o.leases[e.Owner]
	delete(o.leases, e.Owner)
	o.mu.Unlock()
	if ok && l.counted {
		o.held.Add(ctx, -1, o.attrs.get(e.Store, e.Key))
	}
	if o.holdDuration.Enabled(ctx) {
		o.holdDuration.Record(ctx, e.Held.Seconds(), o.attrs.get(e.Store, e.Key))
	}
	if e.Reason != "" && o.losses.Enabled(ctx) {
		o.losses.Add(ctx, 1, o.attrs.get(e.Store, e.Key, attribute.String("reason", string(e.Reason))))
	}
}

// Released implements fence.Observer.
func (o *Observer) Released(ctx context.Context, e fence.Released) {
	if o.releases.Enabled(ctx) {
		o.releases.Add(ctx, 1, o.attrs.get(e.Store, e.Key, attribute.String("outcome", e.Outcome)))
	}
	_, span := o.tracer.Start(ctx, "fence.release", trace.WithTimestamp(e.Start), spanClient)
	if span.IsRecording() {
		span.SetAttributes(attribute.String("fence.store", e.Store), attribute.String("fence.key", e.Key),
			attribute.Int64("fence.token", e.Token), attribute.String("fence.outcome", e.Outcome))
		if e.Err != nil && e.Outcome == fence.OutcomeError {
			span.RecordError(e.Err)
			span.SetStatus(codes.Error, e.Err.Error())
		}
	}
	span.End(trace.WithTimestamp(e.Start.Add(e.Duration)))
}

// attrCache makes the measurement options of the attribute sets without
// the key once: building an attribute set allocates, and these few
// (store, outcome or reason) recur.
type attrCache struct {
	withKey bool
	mu      sync.RWMutex
	opts    map[attrSet]metric.MeasurementOption
}

type attrSet struct {
	store string
	kv    attribute.KeyValue
}

// maxCachedAttrSets bounds the cache; fence's own attributes (outcomes,
// loss reasons) make about a dozen per store.
const maxCachedAttrSets = 256

func (c *attrCache) get(store, key string, kv ...attribute.KeyValue) metric.MeasurementOption {
	if c.withKey || len(kv) > 1 {
		set := append([]attribute.KeyValue{attribute.String("fence.store", store)}, kv...)
		if c.withKey {
			set = append(set, attribute.String("fence.key", key))
		}
		return metric.WithAttributes(set...)
	}
	k := attrSet{store: store}
	if len(kv) == 1 {
		k.kv = kv[0]
	}
	c.mu.RLock()
	opt, ok := c.opts[k]
	c.mu.RUnlock()
	if ok {
		return opt
	}
	attrs := []attribute.KeyValue{attribute.String("fence.store", store)}
	if len(kv) == 1 {
		attrs = append(attrs, kv[0])
	}
	opt = metric.WithAttributeSet(attribute.NewSet(attrs...))
	c.mu.Lock()
	if c.opts == nil {
		c.opts = make(map[attrSet]metric.MeasurementOption)
	}
	if len(c.opts) < maxCachedAttrSets {
		c.opts[k] = opt
	}
	c.mu.Unlock()
	return opt
}

// GuardMetrics is a fence.GuardObserver counting a guard's decisions:
// tokens admitted and stale tokens refused, as fence.guard.admitted and
// fence.guard.refused. A refusal also adds an event fence.guard.refused
// to the span in the guard's context (the write's own span, if the caller
// traces it).
type GuardMetrics struct {
	guard    attribute.KeyValue
	admitted metric.Int64Counter
	refused  metric.Int64Counter
}

var _ fence.GuardObserver = (*GuardMetrics)(nil)

// NewGuardMetrics returns counters for the guard named guard (for example
// "sql", "redis", "http"), on the meter provider of opts (the global one
// by default). Give it to a guard: fence.MemoryGuard{Metrics: m},
// fencesql.WithMetrics(m), ...
func NewGuardMetrics(guard string, opts ...Option) *GuardMetrics {
	cfg := newConfig(opts)
	m := cfg.mp.Meter(instrumentation)
	g := &GuardMetrics{guard: attribute.String("fence.guard", guard)}
	g.admitted, _ = m.Int64Counter("fence.guard.admitted", metric.WithUnit("{write}"),
		metric.WithDescription("Writes a guard admitted."))
	g.refused, _ = m.Int64Counter("fence.guard.refused", metric.WithUnit("{write}"),
		metric.WithDescription("Writes a guard refused for a stale token."))
	return g
}

// GuardDecision implements fence.GuardObserver.
func (g *GuardMetrics) GuardDecision(ctx context.Context, d fence.GuardDecision) {
	if d.Admitted {
		g.admitted.Add(ctx, 1, metric.WithAttributes(g.guard))
		return
	}
	g.refused.Add(ctx, 1, metric.WithAttributes(g.guard))
	attrs := []attribute.KeyValue{g.guard}
	var stale *fence.StaleError
	if errors.As(d.Err, &stale) {
		attrs = append(attrs, attribute.String("fence.resource", stale.Resource),
			attribute.Int64("fence.token", stale.Token), attribute.Int64("fence.guard.highest", stale.Highest))
	}
	trace.SpanFromContext(ctx).AddEvent("fence.guard.refused", trace.WithAttributes(attrs...))
}
