// Package obstest records the events a fence.Client or a guard reports to
// its observer, for tests.
package obstest

import (
	"context"
	"errors"
	"sync"

	"github.com/fencing/fence"
)

// Recorder is a fence.Observer and fence.GuardObserver that keeps every
// event it is given. Safe for concurrent use.
type Recorder struct {
	mu     sync.Mutex
	events []any
}

var (
	_ fence.Observer      = (*Recorder)(nil)
	_ fence.GuardObserver = (*Recorder)(nil)
)

func (r *Recorder) add(e any) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// Events returns a copy of the events so far, in order: values of the
// event types of package fence (fence.AcquireStart, fence.Renewed, ...,
// fence.GuardDecision).
func (r *Recorder) Events() []any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]any(nil), r.events...)
}

// Reset forgets the events so far.
func (r *Recorder) Reset() {
	r.mu.Lock()
	r.events = nil
	r.mu.Unlock()
}

// Of returns the events of type E so far.
func Of[E any](r *Recorder) []E {
	var out []E
	for _, e := range r.Events() {
		if e, ok := e.(E); ok {
			out = append(out, e)
		}
	}
	return out
}

// AcquireStart implements fence.Observer.
func (r *Recorder) AcquireStart(ctx context.Context, e fence.AcquireStart) context.Context {
	r.add(e)
	return ctx
}

// WaitStart implements fence.Observer.
func (r *Recorder) WaitStart(_ context.Context, e fence.WaitStart) { r.add(e) }

// LeaseGranted implements fence.Observer.
func (r *Recorder) LeaseGranted(_ context.Context, e fence.LeaseGranted) { r.add(e) }

// AcquireEnd implements fence.Observer.
func (r *Recorder) AcquireEnd(_ context.Context, e fence.AcquireEnd) { r.add(e) }

// Renewed implements fence.Observer.
func (r *Recorder) Renewed(_ context.Context, e fence.Renewed) { r.add(e) }

// LeaseEnded implements fence.Observer.
func (r *Recorder) LeaseEnded(_ context.Context, e fence.LeaseEnded) { r.add(e) }

// Released implements fence.Observer.
func (r *Recorder) Released(_ context.Context, e fence.Released) { r.add(e) }

// GuardDecision implements fence.GuardObserver.
func (r *Recorder) GuardDecision(_ context.Context, d fence.GuardDecision) { r.add(d) }

// GuardCounts counts the guard decisions so far: admissions, and
// refusals whose error matches fence.ErrStale.
func (r *Recorder) GuardCounts() (admitted, refused int) {
	for _, d := range Of[fence.GuardDecision](r) {
		switch {
		case d.Admitted:
			admitted++
		case errors.Is(d.Err, fence.ErrStale):
			refused++
		}
	}
	return admitted, refused
}
