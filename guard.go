package fence

import (
	"context"
	"fmt"
	"sync"

	"github.com/fencing/fence/internal/kit/tokenrule"
)

// Guard is the resource side of fencing: it admits a write carrying a
// fencing token only if the token is not lower than the highest token it
// has already admitted for the resource, and records the token, in one
// atomic step. The default rule is token >= highest (one holder may write
// many times with its token); strict guards require token > highest.
//
// Guards for particular resources do the check atomically with the write
// itself (fencesql and fencepg inside the caller's transaction, fenceredis
// in one script, fencehttp in front of a handler); MemoryGuard is the
// in-process one.
type Guard interface {
	// Admit records token for resource and returns nil, or returns a
	// *StaleError (matching ErrStale) and records nothing if token is lower
	// than the highest admitted (or not higher, for a strict guard). A token
	// <= 0 is refused with ErrInvalidToken.
	Admit(ctx context.Context, resource string, token int64) error
}

// StaleError reports a write refused because its token is stale. It
// matches ErrStale.
type StaleError struct {
	Resource string
	Token    int64
	// Highest is the highest token already admitted, where the guard tells.
	Highest int64
	// Strict is set when the guard requires tokens above Highest.
	Strict bool
}

func (e *StaleError) Error() string {
	rel := "lower than"
	if e.Strict {
		rel = "not above"
	}
	if e.Highest > 0 {
		return fmt.Sprintf("fence: stale fencing token for %q: %d is %s the highest admitted, %d", e.Resource, e.Token, rel, e.Highest)
	}
	return fmt.Sprintf("fence: stale fencing token for %q: %d", e.Resource, e.Token)
}

// Is reports whether target is ErrStale.
func (e *StaleError) Is(target error) bool { return target == ErrStale }

// MemoryGuard is a Guard that keeps the highest token per resource in
// memory: for resources that live in this process. The zero value is ready
// to use, with the default (>=) rule.
type MemoryGuard struct {
	// Strict makes the guard admit only tokens above the highest admitted.
	Strict bool
	// Metrics, if set, is told every admission and refusal (see
	// GuardObserver; fenceotel.NewGuardMetrics counts them).
	Metrics GuardObserver

	mu      sync.Mutex
	highest map[string]int64
}

// Admit implements Guard.
func (g *MemoryGuard) Admit(ctx context.Context, resource string, token int64) error {
	return g.Do(ctx, resource, token, func() error { return nil })
}

// Highest returns the highest token admitted for resource, 0 if none.
func (g *MemoryGuard) Highest(resource string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.highest[resource]
}

// Do runs write only if the guard admits token for resource, holding the
// guard for that resource while write runs, so that no lower token is
// admitted in between; a failed write still records the token.
func (g *MemoryGuard) Do(ctx context.Context, resource string, token int64, write func() error) error {
	if err := tokenrule.Check(resource, token); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	h := g.highest[resource]
	if !tokenrule.Admissible(token, h, g.Strict) {
		err := &StaleError{Resource: resource, Token: token, Highest: h, Strict: g.Strict}
		ObserveGuard(ctx, g.Metrics, resource, token, err)
		return err
	}
	if g.highest == nil {
		g.highest = make(map[string]int64)
	}
	g.highest[resource] = token
	ObserveGuard(ctx, g.Metrics, resource, token, nil)
	return write()
}
