// Package cancelwait ends a blocking server-side wait (GET_LOCK,
// pg_advisory_lock) when its context ends, so that a cancelled Acquire
// leaves no request queued in the server.
//
// A cancel request can reach the server before the statement it targets
// has started, and then cancels nothing; so cancelling repeats until the
// wait has returned, and after a grace period turns to the hard way
// (killing or cutting the connection).
package cancelwait

import (
	"context"
	"time"
)

// Timing of a cancelled wait: every is how often the cancel is repeated
// while the wait has not returned; grace is when it turns hard and bounds
// each cancel call. Variables so that tests can shorten them.
var (
	every = 100 * time.Millisecond
	grace = 5 * time.Second
)

// Run runs wait, a call that blocks in the server, until it returns. If
// ctx ends first, it calls cancel from another goroutine, again every so
// often, until wait has returned: with hard false at first, with hard
// true once the grace period has passed. The ctx given to cancel bounds
// that one call.
//
// Run returns wait's error, or ctx's error if ctx ended before wait
// returned (wait may then have been granted what it waited for: the
// caller must free it, typically by closing the connection). The
// canceller goroutine is started only when ctx ends (context.AfterFunc),
// so a wait that returns first costs none, and it has ended when Run
// returns.
func Run(ctx context.Context, cancel func(ctx context.Context, hard bool), wait func() error) error {
	ended := make(chan struct{})
	cancelled := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(cancelled)
		hardAt := time.NewTimer(grace)
		defer hardAt.Stop()
		tick := time.NewTicker(every)
		defer tick.Stop()
		hard := false
		for {
			cctx, done := context.WithTimeout(context.Background(), grace)
			cancel(cctx, hard)
			done()
			select {
			case <-ended:
				return
			case <-hardAt.C:
				hard = true
			case <-tick.C:
			}
		}
	})
	err := wait()
	close(ended)
	if !stop() { // the canceller ran, or runs
		<-cancelled
		return ctx.Err()
	}
	return err
}
