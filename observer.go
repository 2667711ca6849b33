package fence

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"sync"
	"time"
)

// Observer receives a Client's events: acquisitions, waits, renewals,
// releases and losses, as plain values. It is the hook for metrics and
// traces (package fenceotel implements it with OpenTelemetry); install one
// with WithObserver. A Client without an observer calls nothing and
// spends nothing on observation.
//
// The methods are called synchronously, on the goroutine doing the work:
//
//   - AcquireStart, WaitStart, LeaseGranted and AcquireEnd on the goroutine
//     calling Acquire or TryAcquire (or a helper built on them: Run,
//     Election, Semaphore, RWMutex, Partitions), in that order; WaitStart
//     only if the call waits, LeaseGranted only if it is granted a lease.
//   - Renewed on the goroutine that renews: fence's renewal schedule, or
//     the caller of Lease.Renew.
//   - LeaseEnded once per granted lease, on the goroutine that ends it: the
//     caller of Release (or Close), or, for a loss, the renewal schedule,
//     the expiry timer, or the driver's session watch.
//   - Released after LeaseEnded, on the caller of Release (or Close).
//
// A lease granted to a Client that is being closed is released at once:
// its LeaseEnded and Released come before its acquisition's AcquireEnd
// (outcome error, ErrClosed).
//
// Methods may be called concurrently, for different leases and calls. An
// Observer must return promptly: it runs on paths that renew leases, and a
// slow one can make a lease expire. It must not call back into the Client
// or its leases (Acquire, Release, Renew, ...): that may deadlock. The
// context it is given is the call's; for Renewed and LeaseEnded, one with
// the values (not the cancellation) of the context the lease was acquired
// with, so that a span current then is the parent of a renewal's span.
type Observer interface {
	// AcquireStart is called when an acquisition starts, before its input
	// is checked. The context it returns is used for the rest of the
	// call, store requests included, and given to WaitStart and
	// AcquireEnd: return ctx itself, or one derived from it (a span).
	// LeaseGranted gets the caller's context, whose values the lease's
	// context carries.
	AcquireStart(ctx context.Context, e AcquireStart) context.Context
	// WaitStart is called when an Acquire finds the key held and starts
	// waiting for it.
	WaitStart(ctx context.Context, e WaitStart)
	// LeaseGranted is called when a lease is granted, before the caller
	// sees it and before it can end.
	LeaseGranted(ctx context.Context, e LeaseGranted)
	// AcquireEnd is called when an acquisition returns, whatever its
	// outcome.
	AcquireEnd(ctx context.Context, e AcquireEnd)
	// Renewed is called after each renewal attempt of a held lease.
	Renewed(ctx context.Context, e Renewed)
	// LeaseEnded is called once when a granted lease ends, by release or
	// loss.
	LeaseEnded(ctx context.Context, e LeaseEnded)
	// Released is called after the store call of a release of a held
	// lease. Releasing a lease already ended calls nothing.
	Released(ctx context.Context, e Released)
}

// Outcomes of an acquisition (AcquireEnd.Outcome).
const (
	OutcomeAcquired  = "acquired"  // the lease was granted
	OutcomeHeld      = "held"      // another owner holds the key (TryAcquire, or the wait timeout passed)
	OutcomeCancelled = "cancelled" // the caller's context ended
	OutcomeInvalid   = "invalid"   // bad key, TTL or option: nothing reached the store
	OutcomeError     = "error"     // the store failed, or the Client is closed
)

// Outcomes of a renewal (Renewed.Outcome) and of a release
// (Released.Outcome).
const (
	OutcomeOK      = "ok"      // the store renewed or released the lease
	OutcomeRefused = "refused" // renewal: the store no longer holds the lease for this owner
	OutcomeLost    = "lost"    // release: the store no longer held the lease; it was lost unnoticed
)

// AcquireStart describes an acquisition that starts.
type AcquireStart struct {
	Store string // the store's name (WithStoreName)
	Key   string
	Kind  Kind
	Wait  bool // Acquire (may wait) rather than TryAcquire
	Start time.Time
}

// WaitStart describes an Acquire that found its key held and waits.
type WaitStart struct {
	Store string
	Key   string
	Kind  Kind
	// HolderToken is the current holder's token where the store said who
	// holds the key; 0 otherwise.
	HolderToken int64
}

// LeaseGranted describes a lease just granted.
type LeaseGranted struct {
	Store      string
	Key        string
	Kind       Kind
	Owner      string // unique per lease
	Token      int64
	TTL        time.Duration
	AcquiredAt time.Time
}

// AcquireEnd describes an acquisition that returns.
type AcquireEnd struct {
	Store   string
	Key     string
	Kind    Kind
	Wait    bool
	Outcome string // OutcomeAcquired, OutcomeHeld, ...
	Err     error  // nil when acquired
	// Owner and Token are the lease's when acquired.
	Owner string
	Token int64
	// Duration is the whole call, waiting included; Waited the part spent
	// waiting, and Waiting whether the call waited at all (WaitStart was
	// called).
	Duration time.Duration
	Waited   time.Duration
	Waiting  bool
}

// Renewed describes one renewal attempt.
type Renewed struct {
	Store   string
	Key     string
	Owner   string
	Token   int64
	Outcome string    // OutcomeOK, OutcomeRefused or OutcomeError
	Err     error     // nil when OK
	Start   time.Time // when the request was sent
	// Duration is the round trip.
	Duration time.Duration
	// Late: the renewal succeeded with less than a sixth of the TTL of
	// validity left (fence also logs a warning).
	Late bool
}

// LeaseEnded describes the end of a lease.
type LeaseEnded struct {
	Store string
	Key   string
	Owner string
	Token int64
	// Held is the time from grant to the end.
	Held time.Duration
	// Reason is why the lease was lost; empty for a release without loss.
	Reason LossReason
	Err    error // the loss's cause, if any
}

// Released describes a release of a held lease, after its store call.
type Released struct {
	Store    string
	Key      string
	Owner    string
	Token    int64
	Outcome  string // OutcomeOK, OutcomeLost or OutcomeError
	Err      error
	Start    time.Time // when the store call started
	Duration time.Duration
	TTL      time.Duration
	Held     time.Duration // from grant to this release
}

// WithObserver makes the Client report its events to o (see Observer).
// Several observers can be combined with Observers. A nil o, the
// default, observes nothing. Only New reads it.
func WithObserver(o Observer) ClientOption {
	return clientSetting{"WithObserver", func(c *config) { c.observer = o }}
}

// WithStoreName sets the store name that observers' events (the
// fence.store attribute of fenceotel's metrics and spans) and fence's logs
// carry. The default is derived from the driver's package: "redis" for
// fenceredis, "postgres" for fencepg. Only New reads it.
func WithStoreName(name string) ClientOption {
	return clientSetting{"WithStoreName", func(c *config) { c.storeName = name }}
}

// Observers returns an Observer that passes every event to each of os in
// turn, nils skipped. AcquireStart's context goes from one to the next.
func Observers(os ...Observer) Observer {
	var m multiObserver
	for _, o := range os {
		if o != nil {
			m = append(m, o)
		}
	}
	switch len(m) {
	case 0:
		return nil
	case 1:
		return m[0]
	}
	return m
}

type multiObserver []Observer

func (m multiObserver) AcquireStart(ctx context.Context, e AcquireStart) context.Context {
	for _, o := range m {
		ctx = o.AcquireStart(ctx, e)
	}
	return ctx
}

func (m multiObserver) WaitStart(ctx context.Context, e WaitStart) {
	for _, o := range m {
		o.WaitStart(ctx, e)
	}
}

func (m multiObserver) LeaseGranted(ctx context.Context, e LeaseGranted) {
	for _, o := range m {
		o.LeaseGranted(ctx, e)
	}
}

func (m multiObserver) AcquireEnd(ctx context.Context, e AcquireEnd) {
	for _, o := range m {
		o.AcquireEnd(ctx, e)
	}
}

func (m multiObserver) Renewed(ctx context.Context, e Renewed) {
	for _, o := range m {
		o.Renewed(ctx, e)
	}
}

func (m multiObserver) LeaseEnded(ctx context.Context, e LeaseEnded) {
	for _, o := range m {
		o.LeaseEnded(ctx, e)
	}
}

func (m multiObserver) Released(ctx context.Context, e Released) {
	for _, o := range m {
		o.Released(ctx, e)
	}
}

// GuardObserver receives a guard's decisions. Guards in fence's packages
// take one through their options (MemoryGuard.Metrics,
// fencesql.WithMetrics, ...); fenceotel.NewGuardMetrics counts them with
// OpenTelemetry. GuardDecision is called on the goroutine calling the
// guard, after the decision and before the guarded write; it must return
// promptly and not call the guard.
type GuardObserver interface {
	GuardDecision(ctx context.Context, d GuardDecision)
}

// GuardDecision is one decision of a guard.
type GuardDecision struct {
	Resource string
	Token    int64
	// Admitted: the token was admitted. Otherwise it was refused as
	// stale, and Err (matching ErrStale) says why.
	Admitted bool
	Err      error
}

// ObserveGuard reports err, a guard's decision on token for resource, to
// o: nil err is an admission, an error matching ErrStale a refusal; other
// errors and a nil o report nothing. For guards outside fence.
func ObserveGuard(ctx context.Context, o GuardObserver, resource string, token int64, err error) {
	if o == nil {
		return
	}
	switch {
	case err == nil:
		o.GuardDecision(ctx, GuardDecision{Resource: resource, Token: token, Admitted: true})
	case errors.Is(err, ErrStale):
		o.GuardDecision(ctx, GuardDecision{Resource: resource, Token: token, Err: err})
	}
}

func outcomeOf(err error) string {
	switch {
	case err == nil:
		return OutcomeAcquired
	case errors.Is(err, ErrHeld):
		return OutcomeHeld
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return OutcomeCancelled
	case errors.Is(err, ErrInvalidKey), errors.Is(err, ErrInvalidTTL), errors.Is(err, ErrInvalidOption):
		return OutcomeInvalid
	}
	return OutcomeError
}

func renewOutcome(err error) string {
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, ErrNotHeld):
		return OutcomeRefused
	}
	return OutcomeError
}

func releaseOutcome(err error) string {
	switch {
	case err == nil:
		return OutcomeOK
	case errors.Is(err, ErrLost):
		return OutcomeLost
	}
	return OutcomeError
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

// overruns warns of the "TTL shorter than the work" anti-pattern:
// renewal hides it until a pause longer than the TTL lets a second holder
// in. It counts, per key, the leases held longer than their TTL.
type overruns struct {
	mu     sync.Mutex
	perKey map[string]int
}

// maxOverrunKeys bounds the memory spent on the long-hold warning.
const maxOverrunKeys = 1024

// released checks a lease released after being held for held.
func (o *overruns) released(l *Lease, held time.Duration, store string) {
	if held <= l.cfg.ttl {
		return
	}
	o.mu.Lock()
	if o.perKey == nil {
		o.perKey = make(map[string]int)
	}
	n, known := o.perKey[l.key]
	if known || len(o.perKey) < maxOverrunKeys {
		n++
		o.perKey[l.key] = n
	}
	o.mu.Unlock()
	if n >= 2 {
		l.cfg.logger.Warn("fence: lease repeatedly held longer than its TTL; renewal kept it, but a pause longer than the TTL would let another holder in while this one works: use fencing tokens on every write, or a TTL longer than the work",
			"key", l.key, "held", held.Round(time.Millisecond), "ttl", l.cfg.ttl, "times", n, "store", store)
	}
}
