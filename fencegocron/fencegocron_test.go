package fencegocron_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencegocron"
	"github.com/fencing/fence/fencemem"
	"github.com/fencing/fence/internal/testkit/leakcheck"
	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// A key held by another scheduler's run makes Lock fail at once, with
// ErrSkipped, so gocron skips the run; once unlocked, the key is free.
func TestLockerSkipsHeldKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := fencemem.New()
		a := fencegocron.NewLocker(fence.New(store))
		b := fencegocron.NewLocker(fence.New(store))
		la, err := a.Lock(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.Lock(ctx, "job"); !errors.Is(err, fence.ErrSkipped) || !errors.Is(err, fence.ErrHeld) {
			t.Errorf("Lock of a held key: %v; want ErrSkipped and ErrHeld", err)
		}
		if err := la.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		lb, err := b.Lock(ctx, "job")
		if err != nil {
			t.Fatalf("Lock after Unlock: %v", err)
		}
		if err := lb.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// With HoldAtLeast, Unlock keeps the lease until that long after the
// grant: another scheduler's Lock in the same period is skipped. Without
// it the same Lock succeeds, so the check can fail.
func TestLockerHoldAtLeast(t *testing.T) {
	for _, hold := range []bool{true, false} {
		synctest.Test(t, func(t *testing.T) {
			ctx := t.Context()
			store := fencemem.New()
			var opts []fence.RunOption
			if hold {
				opts = append(opts, fence.HoldAtLeast(800*time.Millisecond))
			}
			a := fencegocron.NewLocker(fence.New(store), opts...)
			b := fencegocron.NewLocker(fence.New(store), opts...)
			start := time.Now()
			la, err := a.Lock(ctx, "job")
			if err != nil {
				t.Fatal(err)
			}
			unlocked := make(chan error, 1)
			go func() { unlocked <- la.Unlock(ctx) }()
			time.Sleep(500 * time.Millisecond)
			lb, err := b.Lock(ctx, "job")
			switch {
			case hold && !errors.Is(err, fence.ErrSkipped):
				t.Errorf("Lock 500ms into an 800ms HoldAtLeast of a finished run: %v; want ErrSkipped", err)
			case !hold && err != nil:
				t.Errorf("Lock after an unlock without HoldAtLeast: %v; want the lease", err)
			}
			if err := <-unlocked; err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); hold && took != 800*time.Millisecond {
				t.Errorf("Unlock returned %v after the grant; want 800ms (HoldAtLeast)", took)
			}
			if lb != nil {
				if err := lb.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// A lease lost during the run ends the job's context with the loss, and
// Unlock reports it.
func TestLockerReportsLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := fencemem.New()
		l := fencegocron.NewLocker(fence.New(store, fence.WithTTL(3*time.Second)))
		lock, err := l.Lock(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		var cause error
		task := l.Task(func(ctx context.Context, lease *fence.Lease) error {
			store.Delete("job") // the store loses the lease; the next renewal is refused
			<-ctx.Done()
			cause = context.Cause(ctx)
			return nil
		})
		if err := task(ctx); err != nil {
			t.Fatal(err)
		}
		if !errors.Is(cause, fence.ErrLost) {
			t.Errorf("job context's cause after the loss: %v; want ErrLost", cause)
		}
		if err := lock.Unlock(ctx); !errors.Is(err, fence.ErrLost) {
			t.Errorf("Unlock after a loss: %v; want ErrLost", err)
		}
	})
}

// A Locker given WithWait refuses every Lock: gocron skips, never waits.
func TestLockerRefusesWait(t *testing.T) {
	l := fencegocron.NewLocker(fence.New(fencemem.New()), fence.WithWait(time.Second))
	if _, err := l.Lock(t.Context(), "job"); !errors.Is(err, fence.ErrInvalidOption) {
		t.Errorf("Lock with WithWait: %v; want ErrInvalidOption", err)
	}
}

// The job's function gets the run's lease (gocron hands Lock and the job
// the same context): its token, through Task's argument and Lease(ctx).
func TestTaskGetsTheRunsLease(t *testing.T) {
	store := fencemem.New()
	l := fencegocron.NewLocker(fence.New(store))
	type seen struct {
		arg, fromCtx *fence.Lease
		held         fence.Holder
	}
	ran := make(chan seen, 1)
	s := newScheduler(t, gocron.WithDistributedLocker(l))
	_, err := s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
		gocron.NewTask(l.Task(func(ctx context.Context, lease *fence.Lease) error {
			fromCtx, _ := fencegocron.Lease(ctx)
			held, _ := store.Inspect(ctx, "report")
			ran <- seen{lease, fromCtx, held}
			return nil
		})), gocron.WithName("report"))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	got := <-ran
	if got.arg == nil || got.arg.Token() <= 0 || got.arg.Key() != "report" {
		t.Fatalf("job's lease: %+v; want one on %q with a token", got.arg, "report")
	}
	if got.fromCtx != got.arg {
		t.Errorf("Lease(ctx) = %p; want the job's lease %p", got.fromCtx, got.arg)
	}
	if got.held.Token != got.arg.Token() {
		t.Errorf("store's holder while the job ran: %+v; want token %d", got.held, got.arg.Token())
	}
}

// A Task on a scheduler without its Locker refuses to run its function.
func TestTaskWithoutLease(t *testing.T) {
	l := fencegocron.NewLocker(fence.New(fencemem.New()))
	errs := make(chan error, 1)
	s := newScheduler(t)
	_, err := s.NewJob(gocron.OneTimeJob(gocron.OneTimeJobStartImmediately()),
		gocron.NewTask(l.Task(func(context.Context, *fence.Lease) error {
			t.Error("the job's function ran without a lease")
			return nil
		})), gocron.WithName("report"),
		gocron.WithEventListeners(
			gocron.AfterJobRunsWithError(func(_ uuid.UUID, _ string, err error) { errs <- err }),
			gocron.AfterJobRuns(func(uuid.UUID, string) { errs <- nil }),
		))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if err := <-errs; !errors.Is(err, fencegocron.ErrNoLease) {
		t.Errorf("job without a lease: %v; want ErrNoLease", err)
	}
}

// Of two electors, one leads; when its lease is lost, IsLeader says so at
// once and the other takes over with a greater token.
func TestElector(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		store := fencemem.New()
		opts := []fence.ClientOption{fence.WithTTL(3 * time.Second)}
		a := fencegocron.NewElector(fence.New(store, opts...).Election("leader"))
		b := fencegocron.NewElector(fence.New(store, opts...).Election("leader"))
		if err := a.IsLeader(ctx); !errors.Is(err, fencegocron.ErrNotLeader) {
			t.Errorf("IsLeader before Run: %v; want ErrNotLeader", err)
		}
		done := make(chan struct{}, 2)
		go func() { _ = a.Run(ctx); done <- struct{}{} }()
		synctest.Wait()
		go func() { _ = b.Run(ctx); done <- struct{}{} }()
		synctest.Wait()
		if err := a.IsLeader(ctx); err != nil {
			t.Errorf("IsLeader of the first candidate: %v; want nil", err)
		}
		if err := b.IsLeader(ctx); !errors.Is(err, fencegocron.ErrNotLeader) {
			t.Errorf("IsLeader of the second candidate: %v; want ErrNotLeader", err)
		}
		var first int64
		_ = a.Task(func(ctx context.Context, l *fence.Lease) error { first = l.Token(); return nil })(ctx)
		if err := b.Task(func(context.Context, *fence.Lease) error {
			t.Error("a follower's job ran")
			return nil
		})(ctx); !errors.Is(err, fencegocron.ErrNoLease) {
			t.Errorf("a follower's Task: %v; want ErrNoLease", err)
		}

		// a's leadership ends in the store; its next renewal is refused.
		store.Delete("leader")
		time.Sleep(time.Second)
		synctest.Wait()
		if err := a.IsLeader(ctx); !errors.Is(err, fencegocron.ErrNotLeader) {
			t.Errorf("IsLeader after the lease was lost: %v; want ErrNotLeader", err)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		var leader *fencegocron.Elector
		for _, e := range []*fencegocron.Elector{a, b} {
			if e.IsLeader(ctx) == nil {
				if leader != nil {
					t.Fatal("both candidates lead")
				}
				leader = e
			}
		}
		if leader == nil {
			t.Fatal("no candidate leads after the loss")
		}
		_ = leader.Task(func(ctx context.Context, l *fence.Lease) error {
			if l.Token() <= first {
				t.Errorf("new term's token %d is not greater than %d", l.Token(), first)
			}
			return nil
		})(ctx)
		cancel()
		<-done
		<-done
	})
}

// The job's context under an Elector ends when leadership is lost.
func TestElectorTaskContextEndsWithLeadership(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		store := fencemem.New()
		e := fencegocron.NewElector(fence.New(store, fence.WithTTL(3*time.Second)).Election("leader"))
		done := make(chan struct{})
		go func() { _ = e.Run(ctx); close(done) }()
		synctest.Wait()
		err := e.Task(func(ctx context.Context, l *fence.Lease) error {
			store.Delete("leader")
			<-ctx.Done()
			return context.Cause(ctx)
		})(ctx)
		if !errors.Is(err, fence.ErrLost) {
			t.Errorf("job context's cause after leadership was lost: %v; want ErrLost", err)
		}
		cancel()
		<-done
	})
}

// A job that runs on past the loss of leadership keeps the term open, and
// the Election's health check reports it once grace has passed; when the
// job returns, the term ends and the check is healthy again.
func TestElectorTermOutlastsAStuckJob(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		store := fencemem.New()
		election := fence.New(store, fence.WithTTL(3*time.Second)).Election("leader")
		e := fencegocron.NewElector(election)
		done := make(chan struct{})
		go func() { _ = e.Run(ctx); close(done) }()
		synctest.Wait()
		lost := make(chan struct{})
		release := make(chan struct{})
		job := make(chan error, 1)
		go func() {
			job <- e.Task(func(ctx context.Context, l *fence.Lease) error {
				store.Delete("leader") // the next renewal is refused
				<-ctx.Done()
				close(lost)
				<-release // stuck: it does not stop when its context ends
				return nil
			})(ctx)
		}()
		<-lost
		if err := election.Healthy(time.Second); err != nil {
			t.Errorf("health just after the loss: %v; want healthy within grace", err)
		}
		time.Sleep(time.Second)
		if err := election.Healthy(time.Second); !errors.Is(err, fence.ErrLost) {
			t.Errorf("health a second after the loss, the job still running: %v; want ErrLost", err)
		}
		close(release)
		<-job
		synctest.Wait()
		if err := election.Healthy(time.Second); err != nil {
			t.Errorf("health once the job returned: %v; want healthy", err)
		}
		cancel()
		<-done
	})
}

func newScheduler(t *testing.T, opts ...gocron.SchedulerOption) gocron.Scheduler {
	t.Helper()
	s, err := gocron.NewScheduler(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Shutdown(); err != nil {
			t.Error(err)
		}
	})
	return s
}
