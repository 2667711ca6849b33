package fencegocron

import (
	"context"
	"fmt"
	"sync"

	"github.com/fencing/fence"
	"github.com/go-co-op/gocron/v2"
)

// Elector is a gocron.Elector on a fence.Election: the scheduler runs jobs
// only while this process leads. Run campaigns and keeps leadership;
// IsLeader answers from the leadership lease this process holds, without a
// round trip to the store.
type Elector struct {
	e *fence.Election

	mu    sync.Mutex
	lease *fence.Lease // the current term's, nil between terms
	// jobs counts the Tasks running in the current term; Add is called
	// under mu while lease is set, so none starts once Run waits.
	jobs sync.WaitGroup
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector returns an Elector for e. Start Run before the scheduler.
func NewElector(e *fence.Election) *Elector {
	return &Elector{e: e}
}

// Run campaigns for leadership and holds it until ctx ends; a lost term is
// followed by a new campaign, whose lease has a greater token. A term ends
// (and the leadership is resigned) only once the jobs that Task started in
// it have returned, so the Election stays in a term while a job runs on
// past its loss, and Election.Healthy (fencehttp.ElectionHealth) reports
// such a stuck job. Run returns when ctx ends, with an error wrapping
// ctx's cause (joined with a loss or a failed resign, as Election.Lead
// reports them), or when a campaign fails.
func (e *Elector) Run(ctx context.Context) error {
	return e.e.Lead(ctx, func(ctx context.Context, l *fence.Lease) error {
		e.mu.Lock()
		e.lease = l
		e.mu.Unlock()
		<-ctx.Done()
		e.mu.Lock()
		e.lease = nil
		e.mu.Unlock()
		e.jobs.Wait()
		return nil
	})
}

// leading returns the leadership lease if it is valid now.
func (e *Elector) leading() *fence.Lease {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.validLocked()
}

func (e *Elector) validLocked() *fence.Lease {
	l := e.lease
	if l == nil || l.Err() != nil || l.ValidFor() <= 0 {
		return nil
	}
	return l
}

// IsLeader returns nil while this process holds a valid leadership lease,
// and an error matching ErrNotLeader otherwise (not yet elected, between
// terms, or the lease lost or past its local validity).
func (e *Elector) IsLeader(context.Context) error {
	if e.leading() == nil {
		return ErrNotLeader
	}
	return nil
}

// Task wraps a job's function for a scheduler with this Elector: fn gets
// the leadership lease and a context that ends when leadership is lost or
// the job's context ends; Lease(ctx) returns the lease too. The term lasts
// until fn returns (see Run). If this process no longer leads when the run starts, the job returns an error
// matching ErrNoLease (and ErrNotLeader) without calling fn.
func (e *Elector) Task(fn func(ctx context.Context, lease *fence.Lease) error) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		e.mu.Lock()
		l := e.validLocked()
		if l != nil {
			e.jobs.Add(1)
		}
		e.mu.Unlock()
		if l == nil {
			return fmt.Errorf("%w: %w", ErrNoLease, ErrNotLeader)
		}
		defer e.jobs.Done()
		ctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		stop := context.AfterFunc(l.Context(), func() { cancel(context.Cause(l.Context())) })
		defer stop()
		return fn(withLease(ctx, l), l)
	}
}
