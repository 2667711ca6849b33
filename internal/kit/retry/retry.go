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

// Attempt bounds each attempt. A store may hold a request it cannot
// answer for seconds (etcd times out a proposal lost in an election only
// after 5 s and two election timeouts): the next attempt, on a store that
// has a leader again, must not wait behind it.
const Attempt = 2 * time.Second

// Until runs op with a context that ends after Attempt, and again while
// its error is one the store may get over (passing says which; an attempt
// that ran out of time is one) until op succeeds, fails otherwise (the
// entry is gone already, with its session maybe), or ctx ends (the
// driver closed). An attempt that failed at once is followed by the next
// after Interval; one that ran out of time has waited already, and the
// next goes at once: a request etcd lost in an election holds its
// attempt to the end, and waiting a further Interval after it would keep
// the released key held a second longer than the election.
func Until(ctx context.Context, op func(ctx context.Context) error, passing func(error) bool) {
	for {
		attempt, cancel := context.WithTimeout(ctx, Attempt)
		err := op(attempt)
		late := attempt.Err() != nil && ctx.Err() == nil
		cancel()
		if err == nil || !(late || passing(err)) {
			return
		}
		if late {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(Interval):
		}
	}
}
