// Package fencegocron runs go-co-op/gocron v2 jobs under fence leases, on
// several schedulers at once, through gocron's two hooks for that:
//
//   - a Locker (gocron.WithDistributedLocker, or WithDistributedJobLocker
//     for one job): each run of a job takes the lease of the job's name
//     (gocron's lock key) without waiting for it. If another scheduler
//     holds it, Lock fails with an error matching fence.ErrSkipped and
//     gocron skips the run. With fence.HoldAtLeast, the lease is kept after
//     a quick job until that long after its grant, so that a scheduler
//     whose clock or timer fires a little later does not run the same
//     period again.
//   - an Elector (gocron.WithDistributedElector): only the process that
//     leads a fence.Election runs jobs; IsLeader returns nil only while
//     this process holds a valid leadership lease.
//
// Both give the job its lease, and so its fencing token, through Task:
// wrap the job's function with the Locker's or the Elector's Task, and it
// receives the lease and a context that ends when the lease is lost.
// Lease returns the lease from that context, for code further down. Send
// the token with every write the job makes and let the resource refuse
// stale tokens (fence's guards): a scheduler paused in the middle of a
// run, or cut off from the store, may run on after its lease has passed
// to another, and only the token makes its late writes harmless.
//
// Locker and Elector are built on the core's Client.Run and
// Election.Lead: waiting, renewal, validity, loss and release are the
// core's, with the same guarantees on every store.
package fencegocron

import (
	"context"
	"errors"

	"github.com/fencing/fence"
)

var (
	// ErrNoLease: a Task ran without a lease: its Locker took none for this
	// run (the Locker is not the scheduler's or the job's locker, or the
	// job runs with WithDisabledDistributedJobLocker), or its Elector does
	// not lead (leadership was lost between IsLeader and the run). The
	// job's function is not called.
	ErrNoLease = errors.New("fencegocron: no lease for this run")
	// ErrNotLeader: IsLeader's answer when this process does not lead.
	ErrNotLeader = errors.New("fencegocron: not the leader")
)

type leaseKey struct{}

// Lease returns the lease under which the job runs, from the context Task
// gave the job's function (or one derived from it).
func Lease(ctx context.Context) (*fence.Lease, bool) {
	l, ok := ctx.Value(leaseKey{}).(*fence.Lease)
	return l, ok
}

func withLease(ctx context.Context, l *fence.Lease) context.Context {
	return context.WithValue(ctx, leaseKey{}, l)
}
