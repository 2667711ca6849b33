package fence

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"time"
	"weak"

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
func WithMeterProvider(mp metric.MeterProvider) ClientOption {
	return clientSetting{"WithMeterProvider", func(c *config) { c.meterProvider = mp }}
}

// WithTracerProvider sets where fence's spans go. The default is the global
// provider (otel.GetTracerProvider), which records nothing unless the
// application installs an SDK. Only New reads it.
func WithTracerProvider(tp trace.TracerProvider) ClientOption {
	return clientSetting{"WithTracerProvider", func(c *config) { c.tracerProvider = tp }}
}

// WithKeyAttribute makes the lock key an attribute of fence's metrics. Off
// by default: keys are unbounded, and each distinct key is a new time
// series. Spans always carry the key. Only New reads it.
func WithKeyAttribute() ClientOption {
	return clientSetting{"WithKeyAttribute", func(c *config) { c.keyAttribute = true }}
}

// WithStoreName sets the store name fence's metrics, spans and logs carry.
// The default is derived from the driver's package: "redis" for
// fenceredis, "postgres" for fencepg. Only New reads it.
func WithStoreName(name string) ClientOption {
	return clientSetting{"WithStoreName", func(c *config) { c.storeName = name }}
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
	// globalTP: tracer comes from the global provider, which may have an
	// SDK installed later (otel.SetTracerProvider).
	globalTP bool

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
	ageReg          metric.Registration // nil until watchLeases
	meter           metric.Meter

	mu      sync.Mutex
	overrun map[string]int // leases held longer than their TTL, per key

	// Measurement options for attribute sets without the key, made once:
	// building an attribute set allocates, and these few recur.
	storeOnly metric.MeasurementOption
	optMu     sync.RWMutex
	opts      map[attribute.KeyValue]metric.MeasurementOption
}

// spanClient is the span kind option of every span fence starts, made
// once.
var spanClient = trace.WithSpanKind(trace.SpanKindClient)

// noSpan stands for a span not started: it records nothing, and using it
// allocates nothing.
var noSpan = trace.SpanFromContext(context.Background())

// globalDefaultTP is the type of the tracer provider otel.GetTracerProvider
// returns while no SDK is installed as the global one: a delegating
// provider whose spans record nothing until then. Nil if otel's internals
// change so that it cannot be told apart; spans are then always started.
var globalDefaultTP = func() reflect.Type {
	t := reflect.TypeOf(otel.GetTracerProvider())
	if t != nil && t.Kind() == reflect.Pointer && t.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global" {
		return t
	}
	return nil
}()

// maxOverrunKeys bounds the memory spent on the long-hold warning.
const maxOverrunKeys = 1024

var secondsBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}

func newObserver(drv Driver, cfg config) *observer {
	mp, tp := cfg.meterProvider, cfg.tracerProvider
	if mp == nil {
		mp = otel.GetMeterProvider()
	}
	globalTP := tp == nil
	if globalTP {
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

		globalTP: globalTP,
		overrun:  make(map[string]int),
		opts:     make(map[attribute.KeyValue]metric.MeasurementOption),
	}
	o.storeOnly = metric.WithAttributeSet(attribute.NewSet(o.store))
	// Instrument creation fails only for invalid names; fence's are fixed
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
	o.meter = m
	return o
}

// watchLeases makes the fence.lease.age gauge report c's leases. The
// callback holds c weakly, so that a Client dropped without Close can
// still be collected; Close unregisters it.
func (o *observer) watchLeases(c *Client) {
	wc := weak.Make(c)
	o.ageReg, _ = o.meter.RegisterCallback(func(_ context.Context, obs metric.Observer) error {
		c := wc.Value()
		if c == nil {
			return nil
		}
		now := time.Now()
		oldest := map[string]time.Duration{}
		var all time.Duration
		c.mu.Lock()
		for l := range c.leases {
			age := now.Sub(l.acquired)
			all = maxDur(all, age)
			if o.withKey {
				oldest[l.key] = maxDur(oldest[l.key], age)
			}
		}
		c.mu.Unlock()
		if !o.withKey {
			obs.ObserveFloat64(o.leaseAge, all.Seconds(), metric.WithAttributes(o.store))
			return nil
		}
		for key, age := range oldest {
			obs.ObserveFloat64(o.leaseAge, age.Seconds(), o.attrs(key))
		}
		return nil
	}, o.leaseAge)
}

func maxDur(a, b time.Duration) time.Duration {
	if a > b {
		return a
	}
	return b
}

// close stops the fence.lease.age callback.
func (o *observer) close() {
	if o.ageReg != nil {
		_ = o.ageReg.Unregister()
	}
}

// renewedLate counts a renewal that succeeded close to the end of the
// lease's validity.
func (o *observer) renewedLate(ctx context.Context, l *Lease) {
	o.lateRenewals.Add(ctx, 1, o.attrs(l.key))
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
	if !o.withKey && len(kv) <= 1 {
		if len(kv) == 0 {
			return o.storeOnly
		}
		o.optMu.RLock()
		opt, ok := o.opts[kv[0]]
		o.optMu.RUnlock()
		if ok {
			return opt
		}
		opt = metric.WithAttributeSet(attribute.NewSet(o.store, kv[0]))
		o.optMu.Lock()
		if len(o.opts) < maxCachedAttrSets {
			o.opts[kv[0]] = opt
		}
		o.optMu.Unlock()
		return opt
	}
	set := append([]attribute.KeyValue{o.store}, kv...)
	if o.withKey {
		set = append(set, attribute.String("fence.key", key))
	}
	return metric.WithAttributes(set...)
}

// maxCachedAttrSets bounds the cache of attribute sets; fence's own
// attributes (outcomes, loss reasons) make about a dozen.
const maxCachedAttrSets = 64

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

// tracing reports whether a span started now could record. With the
// global provider and no SDK installed as the global one, it could not,
// and fence starts none: even a span that records nothing costs a few
// allocations, on every acquire and release. (The global provider is
// looked up each time: an SDK may be installed after New.)
func (o *observer) tracing() bool {
	return !o.globalTP || globalDefaultTP == nil || reflect.TypeOf(otel.GetTracerProvider()) != globalDefaultTP
}

// startAcquire opens the acquire span. Its attributes are set only if the
// span records: with no tracer provider installed, building them would be
// most of the cost of an uncontended acquire.
func (o *observer) startAcquire(ctx context.Context, tgt target, wait bool) (context.Context, trace.Span) {
	if !o.tracing() {
		return ctx, noSpan
	}
	ctx, span := o.tracer.Start(ctx, "fence.acquire", spanClient)
	if span.IsRecording() {
		span.SetAttributes(o.store, attribute.String("fence.key", tgt.key), attribute.Bool("fence.wait", wait),
			attribute.String("fence.kind", tgt.kind.String()))
	}
	return ctx, span
}

// waitStarted records that an Acquire found key held and waits, until the
// returned function is called. held is what the first attempt found.
func (o *observer) waitStarted(ctx context.Context, span trace.Span, key string, held *HeldError) (done func(waited time.Duration)) {
	// Both ends of the gauge or neither, even if a provider is installed
	// meanwhile.
	counted := o.waiting.Enabled(ctx)
	if counted {
		o.waiting.Add(ctx, 1, o.attrs(key))
	}
	if span.IsRecording() {
		var attrs []attribute.KeyValue
		if held != nil && held.Holder != nil && held.Holder.Token > 0 {
			attrs = append(attrs, attribute.Int64("fence.holder.token", held.Holder.Token))
		}
		span.AddEvent("fence.wait", trace.WithAttributes(attrs...))
	}
	return func(waited time.Duration) {
		if counted {
			o.waiting.Add(ctx, -1, o.attrs(key))
		}
		if span.IsRecording() {
			span.SetAttributes(attribute.Float64("fence.wait.duration", waited.Seconds()))
		}
	}
}

// endAcquire records an acquisition's outcome. waited is the time spent
// waiting for a held key, zero if it never waited.
func (o *observer) endAcquire(ctx context.Context, span trace.Span, key string, l *Lease, err error, start time.Time, waited time.Duration) {
	if o.acquireDuration.Enabled(ctx) || (waited > 0 && o.waitDuration.Enabled(ctx)) {
		outcome := attribute.String("outcome", outcomeOf(err))
		o.acquireDuration.Record(ctx, time.Since(start).Seconds(), o.attrs(key, outcome))
		if waited > 0 {
			o.waitDuration.Record(ctx, waited.Seconds(), o.attrs(key, outcome))
		}
	}
	if span.IsRecording() {
		span.SetAttributes(attribute.String("fence.outcome", outcomeOf(err)))
		if l != nil {
			span.SetAttributes(attribute.Int64("fence.token", l.token), attribute.String("fence.owner", l.owner))
		}
		if err != nil && !errors.Is(err, ErrHeld) {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// granted counts a new lease as held, before it can end. ended uncounts
// it only if it was counted, so the gauge stays right when a provider is
// installed while leases are held.
func (o *observer) granted(ctx context.Context, l *Lease) {
	if o.held.Enabled(ctx) {
		l.countedHeld = true
		o.held.Add(ctx, 1, o.attrs(l.key))
	}
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
	if o.renewals.Enabled(ctx) || o.renewDuration.Enabled(ctx) {
		o.renewals.Add(ctx, 1, o.attrs(l.key, attribute.String("outcome", outcome)))
		o.renewDuration.Record(ctx, took.Seconds(), o.attrs(l.key, attribute.String("outcome", outcome)))
	}
	if !o.tracing() {
		return
	}
	_, span := o.tracer.Start(ctx, "fence.renew", trace.WithTimestamp(start), spanClient)
	if span.IsRecording() {
		span.SetAttributes(o.store, attribute.String("fence.key", l.key), attribute.Int64("fence.token", l.token),
			attribute.String("fence.outcome", outcome))
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}

// ended records a lease's end, by loss (reason) or release (reason "").
func (o *observer) ended(ctx context.Context, l *Lease, reason LossReason) {
	if l.countedHeld {
		o.held.Add(ctx, -1, o.attrs(l.key))
	}
	if o.holdDuration.Enabled(ctx) {
		o.holdDuration.Record(ctx, time.Since(l.acquired).Seconds(), o.attrs(l.key))
	}
	if reason != "" && o.losses.Enabled(ctx) {
		o.losses.Add(ctx, 1, o.attrs(l.key, attribute.String("reason", string(reason))))
	}
}

// released records a release that started at start (zero if no span
// could record then).
func (o *observer) released(ctx context.Context, l *Lease, err error, start time.Time) {
	now := time.Now()
	outcome := "ok"
	switch {
	case errors.Is(err, ErrLost):
		outcome = "lost"
	case err != nil:
		outcome = "error"
	}
	if o.releases.Enabled(ctx) {
		o.releases.Add(ctx, 1, o.attrs(l.key, attribute.String("outcome", outcome)))
	}
	if o.tracing() {
		if start.IsZero() { // an SDK installed during the release
			start = now
		}
		_, span := o.tracer.Start(ctx, "fence.release", trace.WithTimestamp(start), spanClient)
		if span.IsRecording() {
			span.SetAttributes(o.store, attribute.String("fence.key", l.key), attribute.Int64("fence.token", l.token),
				attribute.String("fence.outcome", outcome))
			if err != nil && outcome == "error" {
				span.RecordError(err)
				span.SetStatus(codes.Error, err.Error())
			}
		}
		span.End()
	}

	// The "TTL shorter than the work" anti-pattern: renewal hides it until
	// a pause longer than the TTL lets a second holder in.
	held := now.Sub(l.acquired)
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
		// The refused write's own span, if the caller traces it, says why.
		attrs := []attribute.KeyValue{g.guard}
		var stale *StaleError
		if errors.As(err, &stale) {
			attrs = append(attrs, attribute.String("fence.resource", stale.Resource),
				attribute.Int64("fence.token", stale.Token), attribute.Int64("fence.guard.highest", stale.Highest))
		}
		trace.SpanFromContext(ctx).AddEvent("fence.guard.refused", trace.WithAttributes(attrs...))
	}
}
