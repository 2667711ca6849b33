// Package tokenrule is the rule every guard keeps, written once for the
// guards of this module (fence.MemoryGuard, fencesql, fencepg,
// fenceredis): which tokens a guard may admit at all, and which it admits
// after the highest so far.
package tokenrule

import (
	"errors"
	"fmt"
)

// ErrInvalidToken is fence.ErrInvalidToken, defined here so that this
// package needs nothing of fence.
var ErrInvalidToken = errors.New("fence: invalid fencing token")

// Check returns an error matching ErrInvalidToken unless token can be a
// lease's token (> 0). Guards call it before touching their store.
func Check(resource string, token int64) error {
	if token <= 0 {
		return fmt.Errorf("%w: %d for %q: tokens are > 0", ErrInvalidToken, token, resource)
	}
	return nil
}

// Admissible reports whether a guard admits token when highest is the
// highest token it has admitted so far (0 for none): token >= highest, or
// token > highest for a strict guard.
func Admissible(token, highest int64, strict bool) bool {
	if strict {
		return token > highest
	}
	return token >= highest
}
