package fence

import (
	"fmt"
	"log/slog"
	"maps"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Defaults for the options. Each can be changed per Client (in New) and per
// call.
const (
	// DefaultTTL is how long the store keeps a lease without renewal.
	DefaultTTL = 30 * time.Second
	// MinTTL is the shortest TTL fence accepts: below it no renewal round
	// trip fits in the lease.
	MinTTL = 10 * time.Millisecond
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = 16 << 10
)

// Option configures a Client (in New) or a single call (Acquire,
// TryAcquire, Run, Election). Options given to a call override the
// Client's.
type Option func(*config)

type config struct {
	ttl         time.Duration
	wait        time.Duration // 0: until ctx is done
	renew       time.Duration // 0: TTL/3
	noRenew     bool
	margin      time.Duration // <0: default
	ownerPrefix string
	meta        map[string]string
	logger      *slog.Logger
	skipIfHeld  bool
	holdAtLeast time.Duration
	err         error // first invalid option

	// Read by New only.
	meterProvider  metric.MeterProvider
	tracerProvider trace.TracerProvider
	keyAttribute   bool
	storeName      string
}

func defaultConfig() *config {
	return &config{ttl: DefaultTTL, margin: -1, logger: slog.New(slog.DiscardHandler)}
}

// with returns c with opts applied. A config is never changed once made:
// the Client's, a call's and a lease's may be one and the same. So with
// returns c itself when there is nothing to apply (no copy on a call
// without options), and a new config otherwise, its metadata map copied
// too, so that no option ever changes c.
func (c *config) with(opts []Option) *config {
	if len(opts) == 0 {
		return c
	}
	n := *c
	n.meta = maps.Clone(c.meta)
	for _, o := range opts {
		if o != nil {
			o(&n)
		}
	}
	return &n
}

func (c *config) invalid(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

// WithTTL sets how long the store keeps a lease without renewal. Default
// DefaultTTL (30s). It must be at least MinTTL and leave room for the
// drift margin and a renewal.
func WithTTL(ttl time.Duration) Option {
	return func(c *config) { c.ttl = ttl }
}

// WithWait bounds how long Acquire waits for a held key; when it passes,
// Acquire returns a *HeldError. Zero (the default) waits until the
// context is done.
func WithWait(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("wait timeout %v is negative", d)
		}
		c.wait = d
	}
}

// WithRenewInterval sets how often a held lease is renewed. The default is
// a third of the TTL. It must be shorter than the lease's validity (TTL
// minus the drift margin).
func WithRenewInterval(d time.Duration) Option {
	return func(c *config) {
		if d <= 0 {
			c.invalid("renew interval %v is not positive", d)
		}
		c.renew = d
	}
}

// WithoutRenewal turns automatic renewal off: the lease ends at its TTL
// (its context is cancelled with ErrLost, reason LossExpired) unless the
// holder calls Lease.Renew or Release first.
func WithoutRenewal() Option {
	return func(c *config) { c.noRenew = true }
}

// WithDriftMargin sets how much is subtracted from the TTL when computing a
// lease's local validity, to allow for the rate difference between this
// machine's clock and the store's. The default is 2% of the TTL plus 5ms.
func WithDriftMargin(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("drift margin %v is negative", d)
		}
		c.margin = d
	}
}

// WithOwner sets a readable prefix for owner ids, such as a host or worker
// name. Every acquisition still gets a unique, unguessable owner id:
// prefix + "-" + 32 random hex digits. The prefix must be printable and at
// most 64 bytes.
func WithOwner(prefix string) Option {
	return func(c *config) {
		if len(prefix) > 64 || !utf8.ValidString(prefix) || !printable(prefix) {
			c.invalid("owner prefix %q must be printable and at most 64 bytes", prefix)
		}
		c.ownerPrefix = prefix
	}
}

// WithMetadata adds holder metadata that stores keep where they can and
// show in Inspect, List and the CLI. fence itself sets "host", "pid" and
// "acquired_at" (RFC 3339, this machine's clock, informational) unless
// given here.
func WithMetadata(meta map[string]string) Option {
	return func(c *config) {
		if c.meta == nil {
			c.meta = make(map[string]string, len(meta))
		}
		maps.Copy(c.meta, meta)
	}
}

// WithLogger sets the logger for lease events (losses, slow renewals).
// Silent by default.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		c.logger = l
	}
}

// SkipIfHeld makes Run return at once, with an error matching ErrSkipped
// and ErrHeld, when another owner holds the key, instead of waiting: the
// scheduled-job case ("another instance is running it").
func SkipIfHeld() Option {
	return func(c *config) { c.skipIfHeld = true }
}

// HoldAtLeast makes Run keep the lease after its function returns until d
// has passed since the lease was acquired, so that a job that finishes
// quickly is not run again by another instance in the same period.
func HoldAtLeast(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("hold-at-least %v is negative", d)
		}
		c.holdAtLeast = d
	}
}

func (c *config) driftMargin() time.Duration {
	if c.margin >= 0 {
		return c.margin
	}
	return c.ttl/50 + 5*time.Millisecond
}

func (c *config) renewInterval() time.Duration {
	if c.renew > 0 {
		return c.renew
	}
	return c.ttl / 3
}

// validate checks the options that depend on each other, for key.
func (c *config) validate(key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if c.err != nil {
		return fmt.Errorf("%w (key %q)", c.err, key)
	}
	if c.ttl < MinTTL {
		return fmt.Errorf("%w: %v for key %q: must be at least %v", ErrInvalidTTL, c.ttl, key, MinTTL)
	}
	validity := c.ttl - c.driftMargin()
	if validity <= 0 {
		return fmt.Errorf("%w: %v for key %q leaves no validity after the drift margin %v", ErrInvalidTTL, c.ttl, key, c.driftMargin())
	}
	if !c.noRenew && c.renewInterval() >= validity {
		return fmt.Errorf("%w: %v for key %q is too short to renew every %v (validity %v after the drift margin)",
			ErrInvalidTTL, c.ttl, key, c.renewInterval(), validity)
	}
	return nil
}

// ValidateKey reports whether key can name a lock: non-empty, valid UTF-8,
// no NUL bytes, at most MaxKeyLen bytes. Errors match ErrInvalidKey.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty key", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("%w: key %.32q... is %d bytes, more than %d", ErrInvalidKey, key, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("%w: key %q is not valid UTF-8", ErrInvalidKey, key)
	}
	for i := 0; i < len(key); i++ {
		if key[i] == 0 {
			return fmt.Errorf("%w: key %q contains a NUL byte", ErrInvalidKey, key)
		}
	}
	return nil
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}
