package fence

import (
	"fmt"
	"log/slog"
	"maps"
	"time"
	"unicode/utf8"
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

// Option is a lease setting: valid in New, as the default for every
// call, and in every call that acquires, where it overrides the default.
//
// Options come in three scopes, each its own type, so that an option is
// accepted only where it has an effect:
//
//   - ClientOption, taken by New: the Client's settings. Every Option is
//     one (the default for every call), and so are the settings that only
//     a Client has, such as WithMeterProvider.
//   - AcquireOption, taken by every call that acquires (Acquire,
//     TryAcquire, and the Semaphore, RWMutex, Election and Partitions made
//     by a Client): the settings of the leases it takes. Every Option is
//     one.
//   - RunOption, taken by Client.Run and Semaphore.Run: every Option, and
//     the settings that only Run has (SkipIfHeld, HoldAtLeast).
//
// An option of the wrong scope does not compile. The few misuses that
// types cannot refuse are refused when the call runs, with an error
// matching ErrInvalidOption that names the option and the call: WithWait
// given to a call that never waits (TryAcquire and its kin, Run
// together with SkipIfHeld, or Partitions).
type Option interface {
	ClientOption
	AcquireOption
	RunOption
}

// ClientOption configures a Client: New takes it.
type ClientOption interface {
	applyTo(*config)
	clientOption()
}

// AcquireOption configures the leases of one call that acquires.
type AcquireOption interface {
	applyTo(*config)
	acquireOption()
}

// RunOption configures one Run.
type RunOption interface {
	applyTo(*config)
	runOption()
}

// setting is an Option, valid in every scope. Its name, the function that
// made it, names it in errors.
type setting struct {
	name string
	set  func(*config)
}

func (s setting) applyTo(c *config) { s.set(c) }
func (setting) clientOption()       {}
func (setting) acquireOption()      {}
func (setting) runOption()          {}

// runSetting is a RunOption only.
type runSetting setting

func (s runSetting) applyTo(c *config) { s.set(c) }
func (runSetting) runOption()          {}

// clientSetting is a ClientOption only.
type clientSetting setting

func (s clientSetting) applyTo(c *config) { s.set(c) }
func (clientSetting) clientOption()       {}

// given reports whether opts, given to one call, include the option
// named name.
func given[O interface{ applyTo(*config) }](opts []O, name string) bool {
	for _, o := range opts {
		switch s := any(o).(type) {
		case setting:
			if s.name == name {
				return true
			}
		case runSetting:
			if s.name == name {
				return true
			}
		}
	}
	return false
}

// refuse returns c, or a copy of c that fails validation with an error
// naming the option and the call, if opts (given to call) include the
// option named name, which call cannot honour for the reason why.
func refuse[O interface{ applyTo(*config) }](c *config, opts []O, name, call, why string) *config {
	if !given(opts, name) {
		return c
	}
	n := *c
	n.invalid("%s given to %s, which %s", name, call, why)
	return &n
}

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
	lockDelay   time.Duration // 0: none; see lockdelay.go
	err         error         // first invalid option

	// WithResume: take back the lease of this owner and token.
	resumeOwner string
	resumeToken int64

	// Read by New only.
	storeName string
	observer  Observer
}

func defaultConfig() *config {
	return &config{ttl: DefaultTTL, margin: -1, logger: slog.New(slog.DiscardHandler)}
}

// with returns c with opts applied. A config is never changed once made:
// the Client's, a call's and a lease's may be one and the same. So with
// returns c itself when there is nothing to apply (no copy on a call
// without options), and a new config otherwise, its metadata map copied
// too, so that no option ever changes c.
func with[O interface{ applyTo(*config) }](c *config, opts []O) *config {
	if len(opts) == 0 {
		return c
	}
	n := *c
	n.meta = maps.Clone(c.meta)
	for _, o := range opts {
		if any(o) != nil {
			o.applyTo(&n)
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
	return setting{"WithTTL", func(c *config) { c.ttl = ttl }}
}

// WithWait bounds how long Acquire waits for a held key; when it passes,
// Acquire returns a *HeldError. Zero (the default) waits until the
// context is done. A call that never waits (TryAcquire and its kin, Run
// with SkipIfHeld) refuses it with ErrInvalidOption; as a default (in
// New, or for a Semaphore or RWMutex) it applies to the calls that wait.
func WithWait(d time.Duration) Option {
	return setting{"WithWait", func(c *config) {
		if d < 0 {
			c.invalid("wait timeout %v is negative", d)
		}
		c.wait = d
	}}
}

// WithRenewInterval sets how often a held lease is renewed. The default is
// a third of the TTL. It must be shorter than the lease's validity (TTL
// minus the drift margin).
func WithRenewInterval(d time.Duration) Option {
	return setting{"WithRenewInterval", func(c *config) {
		if d <= 0 {
			c.invalid("renew interval %v is not positive", d)
		}
		c.renew = d
	}}
}

// WithoutRenewal turns automatic renewal off: the lease ends at its TTL
// (its context is cancelled with ErrLost, reason LossExpired) unless the
// holder calls Lease.Renew or Release first.
func WithoutRenewal() Option {
	return setting{"WithoutRenewal", func(c *config) { c.noRenew = true }}
}

// WithDriftMargin sets how much is subtracted from the TTL when computing a
// lease's local validity, to allow for the rate difference between this
// machine's clock and the store's. The default is 2% of the TTL plus 5ms.
func WithDriftMargin(d time.Duration) Option {
	return setting{"WithDriftMargin", func(c *config) {
		if d < 0 {
			c.invalid("drift margin %v is negative", d)
		}
		c.margin = d
	}}
}

// WithOwner sets a readable prefix for owner ids, such as a host or worker
// name. Every acquisition still gets a unique, unguessable owner id:
// prefix + "-" + 32 random hex digits. The prefix must be printable and at
// most 64 bytes.
func WithOwner(prefix string) Option {
	return setting{"WithOwner", func(c *config) {
		if len(prefix) > 64 || !utf8.ValidString(prefix) || !printable(prefix) {
			c.invalid("owner prefix %q must be printable and at most 64 bytes", prefix)
		}
		c.ownerPrefix = prefix
	}}
}

// WithMetadata adds holder metadata that stores keep where they can and
// show in Inspect, List and the CLI. fence itself sets "host", "pid" and
// "acquired_at" (RFC 3339, this machine's clock, informational) unless
// given here.
func WithMetadata(meta map[string]string) Option {
	return setting{"WithMetadata", func(c *config) {
		if c.meta == nil {
			c.meta = make(map[string]string, len(meta))
		}
		maps.Copy(c.meta, meta)
	}}
}

// WithLogger sets the logger for lease events (losses, slow renewals).
// Silent by default.
func WithLogger(l *slog.Logger) Option {
	return setting{"WithLogger", func(c *config) {
		if l == nil {
			l = slog.New(slog.DiscardHandler)
		}
		c.logger = l
	}}
}

// SkipIfHeld makes Run return at once, with an error matching ErrSkipped
// and ErrHeld, when another owner holds the key, instead of waiting: the
// scheduled-job case ("another instance is running it").
func SkipIfHeld() RunOption {
	return runSetting{"SkipIfHeld", func(c *config) { c.skipIfHeld = true }}
}

// HoldAtLeast makes Run keep the lease after its function returns until d
// has passed since the lease was acquired, so that a job that finishes
// quickly is not run again by another instance in the same period.
func HoldAtLeast(d time.Duration) RunOption {
	return runSetting{"HoldAtLeast", func(c *config) {
		if d < 0 {
			c.invalid("hold-at-least %v is negative", d)
		}
		c.holdAtLeast = d
	}}
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
