// Package retry finishes, in the background, a store operation that the
// store could not answer: the release of a session-bound lease whose
// session outlives an outage (an election, a lost connection). Left
// undone, the session would keep the lease's entry, and the key held by
// a lease its holder released, for as long as the session lives.
package retry

import (
	"context"
	"time"
)

// Interval is how long Until waits between attempts.
const Interval = time.Second

// Until runs op, and again every Interval while passing says its error
// is one the store may get over (it could not answer for now), until op
// succeeds, fails otherwise (the entry is gone already, with its
// session maybe), or ctx ends (the driver closed).
func Until(ctx context.Context, op func() error, passing func(error) bool) {
	for {
		err := op()
		if err == nil || !passing(err) {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(Interval):
		}
	}
}
