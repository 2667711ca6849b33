package fence

import (
	"context"
	"errors"
	"fmt"
)

// Breaker is implemented by drivers that can force-release a lock: take
// a lease away from a holder that is stuck or gone, without waiting for
// its TTL, and without ever hurting a newer holder.
type Breaker interface {
	// Break deletes key's lock (KindLock) only if it is still the lease
	// with token, or whatever lease holds it if token is 0, in one atomic
	// step, and returns the holder it deleted. It keeps what the store
	// needs for tokens to go on increasing: the next acquisition's token
	// is greater than the broken one. The broken holder's next Extend
	// returns ErrNotHeld.
	//
	// A lease that ended without a release and whose lock-delay still
	// blocks the key (Request.LockDelay) counts as held: breaking it
	// lifts the delay, the key is free at once. That is the operator's
	// decision, as breaking a live lease is; stores that judge expiry on
	// a contender's own clock could not tell the two apart at once.
	//
	// If key is free (or its lease expired and no delay blocks it), Break
	// returns an error matching ErrNotHeld; if it is held with another
	// token, a *HeldError naming the holder where the store tells it.
	// Either way it changes nothing.
	Break(ctx context.Context, key string, token int64) (Holder, error)
}

// BreakOption configures one Client.Break.
type BreakOption func(*breakConfig)

type breakConfig struct {
	anyHolder bool
	after     []func(ctx context.Context, broken Holder) error
}

// BreakAnyHolder lets Client.Break with token 0 delete whatever lease
// holds the key. Without it, token 0 is refused: a holder that took the
// key over between a look at it and the break would be broken instead.
func BreakAnyHolder() BreakOption {
	return func(c *breakConfig) { c.anyHolder = true }
}

// AfterBreak makes Client.Break call f with the holder it broke, once the
// store has deleted the lease, for example to advance the guards of the
// resources the holder wrote to (see AdvanceGuard). Break returns f's
// error, if any, with the broken holder.
func AfterBreak(f func(ctx context.Context, broken Holder) error) BreakOption {
	return func(c *breakConfig) { c.after = append(c.after, f) }
}

// AdvanceGuard makes Client.Break advance g for resource at once, so that
// g refuses the broken holder's writes from then on, not only once the
// next holder has written. g is told the lowest token a later holder can
// carry, the broken token + 1, as if that holder had written; a guard
// that already admitted more is left as it is. A *MemoryGuard with
// Strict set is told the broken token instead, since it admits a token
// once only. Another strict guard must be advanced with AfterBreak to
// the broken token: told the broken token + 1, it would refuse a next
// holder that carries exactly that token.
func AdvanceGuard(g Guard, resource string) BreakOption {
	return AfterBreak(func(ctx context.Context, broken Holder) error {
		next := broken.Token + 1
		if mg, ok := g.(*MemoryGuard); ok && mg.Strict {
			next = broken.Token
		}
		if err := g.Admit(ctx, resource, next); err != nil && !errors.Is(err, ErrStale) {
			return fmt.Errorf("fence: break %q: advance the guard of %q to token %d: %w", broken.Key, resource, next, err)
		}
		return nil
	})
}

// Break force-releases key's lock: it deletes the lease only if it is
// still the one with token, so that it can never hurt a holder that took
// the key over since token was seen. Token 0 deletes whatever lease
// holds the key, and needs BreakAnyHolder. The store's token counter is
// kept: the next holder's token is greater, so a guard refuses the
// broken holder's writes once the next holder has written (at once, with
// AdvanceGuard). The broken holder finds out at its next renewal, which
// the store refuses: its lease is lost (LossRefused).
//
// Break returns the holder it deleted. If the key is free, the error
// matches ErrNotHeld; if it is held with another token, it is a
// *HeldError naming the holder; the store is then unchanged. Drivers
// without a Breaker return an error matching ErrUnsupported.
//
// Every break, and every break refused, is logged through the Client's
// logger (WithLogger) with the key, token and owner.
func (c *Client) Break(ctx context.Context, key string, token int64, opts ...BreakOption) (Holder, error) {
	var cfg breakConfig
	for _, o := range opts {
		o(&cfg)
	}
	if err := ValidateKey(key); err != nil {
		return Holder{}, err
	}
	switch {
	case token < 0:
		return Holder{}, fmt.Errorf("%w: break %q with token %d", ErrInvalidToken, key, token)
	case token == 0 && !cfg.anyHolder:
		return Holder{}, fmt.Errorf("%w: break %q with token 0 (whoever holds it) needs BreakAnyHolder", ErrInvalidOption, key)
	}
	b, ok := c.drv.(Breaker)
	if !ok {
		return Holder{}, fmt.Errorf("%w: break %q", ErrUnsupported, key)
	}
	log := c.cfg.logger
	h, err := b.Break(ctx, key, token)
	if err != nil {
		log.InfoContext(ctx, "fence: break refused", "key", key, "token", token, "store", c.store, "err", err)
		return Holder{}, fmt.Errorf("fence: break %q (token %d): %w", key, token, err)
	}
	h.Key = key
	if token != 0 && h.Token != token {
		return h, fmt.Errorf("fence: break %q: driver broke token %d, asked for %d", key, h.Token, token)
	}
	log.WarnContext(ctx, "fence: lease broken", "key", key, "token", h.Token, "owner", h.Owner,
		"host", h.Meta["host"], "pid", h.Meta["pid"], "store", c.store)
	var errs []error
	for _, f := range cfg.after {
		if err := f(ctx, h); err != nil {
			errs = append(errs, err)
		}
	}
	return h, errors.Join(errs...)
}
