package retry

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

var errPassing = errors.New("could not answer")

func passing(err error) bool { return errors.Is(err, errPassing) }

// TestUntil: attempts go on every Interval while the error is passing,
// and stop at success, at another error, and when ctx ends.
func TestUntil(t *testing.T) {
	for _, c := range []struct {
		name     string
		results  []error // op's results in turn; then passing forever
		cancelAt time.Duration
		want     int // attempts
	}{
		{"succeeds at once", []error{nil}, 0, 1},
		{"succeeds after the outage", []error{errPassing, errPassing, nil}, 0, 3},
		{"gone already", []error{errPassing, errors.New("no such entry")}, 0, 2},
		{"driver closed", nil, 2*Interval + Interval/2, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if c.cancelAt > 0 {
					time.AfterFunc(c.cancelAt, cancel)
				}
				n := 0
				start := time.Now()
				Until(ctx, func(context.Context) error {
					if got, want := time.Since(start), time.Duration(n)*Interval; got != want {
						t.Errorf("attempt %d at %v, want %v", n+1, got, want)
					}
					n++
					if n <= len(c.results) {
						return c.results[n-1]
					}
					return errPassing
				}, passing)
				if n != c.want {
					t.Errorf("%d attempts, want %d", n, c.want)
				}
			})
		})
	}
}

// TestUntilBoundsAnAttempt: an attempt the store holds (it answers only
// when the attempt's context ends) gives way to the next after Attempt,
// at once (it has waited already), and the next, answered, ends the
// retries.
func TestUntilBoundsAnAttempt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		n := 0
		Until(context.Background(), func(ctx context.Context) error {
			n++
			if n == 1 {
				<-ctx.Done() // held: never answered in time
				return ctx.Err()
			}
			return nil
		}, func(error) bool { return false }) // nothing else is passing
		if n != 2 {
			t.Fatalf("%d attempts, want 2: a held attempt must be retried", n)
		}
		if got, want := time.Since(start), Attempt; got != want {
			t.Errorf("second attempt done at %v, want %v: a held attempt has waited already", got, want)
		}
	})
}
