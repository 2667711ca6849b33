package fencegocron_test

import (
	"context"
	"fmt"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencegocron"
	"github.com/fencing/fence/fencemem"
	"github.com/go-co-op/gocron/v2"
)

// Every scheduler of a job gets the same Locker setup over one store; each
// run of the job holds the lease of the job's name, and the others skip it.
// HoldAtLeast keeps the lease for most of the period, so a scheduler whose
// timer fires a little later does not run the same period again. The job
// sends its lease's token with its writes.
func ExampleNewLocker() {
	store := fencemem.New() // one shared store (fenceredis, fencepg, ...) in production
	c := fence.New(store, fence.WithTTL(30*time.Second))
	locker := fencegocron.NewLocker(c, fence.HoldAtLeast(50*time.Second))

	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	_, err = s.NewJob(gocron.DurationJob(time.Minute),
		gocron.NewTask(locker.Task(func(ctx context.Context, l *fence.Lease) error {
			defer close(done)
			// ctx ends if the lease is lost; send l.Token() with every write.
			fmt.Printf("%s runs with a fencing token: %v\n", l.Key(), l.Token() > 0)
			return nil
		})),
		gocron.WithName("invoices"), // the lock key
		gocron.WithStartAt(gocron.WithStartImmediately()))
	if err != nil {
		panic(err)
	}
	s.Start()
	<-done
	if err := s.Shutdown(); err != nil {
		panic(err)
	}
	// Output: invoices runs with a fencing token: true
}

// With an Elector, only the process that leads runs the scheduler's jobs.
// Run keeps campaigning; IsLeader answers from the leadership lease, and
// Task hands the job the current term's lease.
func ExampleNewElector() {
	ctx, cancel := context.WithCancel(context.Background())
	c := fence.New(fencemem.New(), fence.WithTTL(30*time.Second))
	elector := fencegocron.NewElector(c.Election("scheduler-leader"))
	campaign := make(chan error, 1)
	go func() { campaign <- elector.Run(ctx) }()
	for elector.IsLeader(ctx) != nil { // only to make the example's output certain
		time.Sleep(time.Millisecond)
	}

	s, err := gocron.NewScheduler(gocron.WithDistributedElector(elector))
	if err != nil {
		panic(err)
	}
	done := make(chan struct{})
	_, err = s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
		gocron.NewTask(elector.Task(func(ctx context.Context, l *fence.Lease) error {
			defer close(done)
			lease, _ := fencegocron.Lease(ctx) // the same lease, for code that has only ctx
			fmt.Printf("the leader runs the job, term token %v\n", lease.Token() == l.Token())
			return nil
		})))
	if err != nil {
		panic(err)
	}
	s.Start()
	<-done
	if err := s.Shutdown(); err != nil {
		panic(err)
	}
	cancel()
	<-campaign // resigned
	// Output: the leader runs the job, term token true
}
