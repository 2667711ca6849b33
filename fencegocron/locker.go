package fencegocron

import (
	"context"
	"fmt"
	"sync"

	"github.com/fencing/fence"
	"github.com/go-co-op/gocron/v2"
)

// Locker is a gocron.Locker on a fence.Client: each run of a job holds the
// lease of the job's name, taken without waiting. Use one Locker per
// scheduler; it is safe for concurrent use.
type Locker struct {
	c    *fence.Client
	opts []fence.RunOption

	mu   sync.Mutex
	runs map[context.Context]*run // by the job's context; see Task
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker taking leases from c. The options apply to
// every run, as to Client.Run: fence.HoldAtLeast keeps each lease that long
// after its grant however quick the job; fence.WithTTL and the other
// acquire options set the lease. fence.SkipIfHeld is implied; fence.WithWait
// is refused (by every Lock, with fence.ErrInvalidOption), since gocron
// skips a run whose lock is taken rather than waiting for it.
func NewLocker(c *fence.Client, opts ...fence.RunOption) *Locker {
	return &Locker{c: c, opts: append([]fence.RunOption{fence.SkipIfHeld()}, opts...), runs: map[context.Context]*run{}}
}

// run is one run of a job: a Client.Run, on its own goroutine, whose
// function holds the lease until the Lock is unlocked.
type run struct {
	l      *Locker
	jobCtx context.Context
	ctx    context.Context // Client.Run's function's: ends when the lease is lost or jobCtx ends
	lease  *fence.Lease

	granted chan struct{} // closed once ctx and lease are set
	unlock  chan struct{} // closed by Unlock
	done    chan struct{} // closed once Client.Run has returned err
	err     error
	once    sync.Once
}

// Lock takes key's lease for one run of a job, without waiting: if another
// owner holds it, the error matches fence.ErrSkipped (and fence.ErrHeld)
// and gocron skips the run. ctx is the job's context; the lease is
// released, once the HoldAtLeast time has passed, when gocron calls Unlock
// after the run, or when ctx ends.
func (l *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	r := &run{l: l, jobCtx: ctx, granted: make(chan struct{}), unlock: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = l.c.Run(ctx, key, func(rctx context.Context, lease *fence.Lease) error {
			r.ctx, r.lease = rctx, lease
			close(r.granted)
			// Held until the job has returned, even past a loss: the job
			// learns of a loss through its context, and the lease is
			// released (or the loss reported) only once it has stopped.
			<-r.unlock
			return nil
		}, l.opts...)
	}()
	select {
	case <-r.granted:
	case <-r.done:
		return nil, fmt.Errorf("fencegocron: lock %q: %w", key, r.err)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.runs[ctx]; ok {
		// Two runs under one job context at once cannot both hold the
		// key: a second Lock finds the key held and is skipped above.
		// Reaching here means a broken assumption; say so.
		r.release()
		return nil, fmt.Errorf("fencegocron: lock %q: a run under this job context holds a lease already", key)
	}
	l.runs[ctx] = r
	return r, nil
}

// Unlock ends the run: it keeps the lease until the HoldAtLeast time has
// passed (or the job's context ends), releases it and returns what
// Client.Run returned: nil, or an error matching fence.ErrLost if the
// lease was lost at any moment of the run, or one saying the release
// failed. gocron discards this error; a loss is also logged by the
// Client's logger (fence.WithLogger), and the job saw it through its
// context.
func (r *run) Unlock(ctx context.Context) error {
	r.l.mu.Lock()
	if r.l.runs[r.jobCtx] == r {
		delete(r.l.runs, r.jobCtx)
	}
	r.l.mu.Unlock()
	return r.release()
}

// release lets Client.Run's function return and waits for Client.Run:
// the HoldAtLeast wait ends by the job's context at the latest, and the
// release is bounded by the TTL.
func (r *run) release() error {
	r.once.Do(func() { close(r.unlock) })
	<-r.done
	return r.err
}

// Task wraps a job's function for a job that runs under this Locker: fn
// gets the run's lease and a context that ends when the lease is lost or
// the job's context ends (gocron's shutdown); Lease(ctx) returns the lease
// too. Pass the result to gocron.NewTask.
//
// gocron hands Lock and the job's function the same context, the job's
// own; Task finds the run's lease by it. If this Locker took no lease for
// the run, the job returns an error matching ErrNoLease without calling fn.
func (l *Locker) Task(fn func(ctx context.Context, lease *fence.Lease) error) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		l.mu.Lock()
		r := l.runs[ctx]
		l.mu.Unlock()
		if r == nil {
			return fmt.Errorf("%w: is this Locker the job's (gocron.WithDistributedLocker or WithDistributedJobLocker)?", ErrNoLease)
		}
		return fn(withLease(r.ctx, r.lease), r.lease)
	}
}
