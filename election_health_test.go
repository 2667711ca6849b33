package fence_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

// stallingStore is fencemem whose renewals never get an answer: every
// Extend blocks until its context ends, as against a store that has gone
// silent.
type stallingStore struct{ *fencemem.Store }

func (s stallingStore) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	c, err := s.Store.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return stallingClaim{c}, nil
}

type stallingClaim struct{ fence.Claim }

func (stallingClaim) Extend(ctx context.Context, _ time.Duration) error {
	<-ctx.Done()
	return ctx.Err()
}

const healthGrace = 2 * time.Second

// stalledLeader runs a leader whose renewals stall and whose work goes on
// after its context ended (it ignores the loss), and probes its health at
// each step. It returns the problems it found with what probe said.
func stalledLeader(t *testing.T, probe func(e *fence.Election) error) []string {
	var probs []string
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		store := stallingStore{fencemem.New()}
		e := fence.New(store, fence.WithTTL(3*time.Second)).Election("leader")
		follower := fence.New(store, fence.WithTTL(3*time.Second)).Election("leader")
		check := func(step string, unhealthy bool) {
			err := probe(e)
			switch {
			case unhealthy && !errors.Is(err, fence.ErrLost):
				probs = append(probs, step+": health "+errString(err)+"; want unhealthy, matching ErrLost")
			case !unhealthy && err != nil:
				probs = append(probs, step+": health "+errString(err)+"; want healthy")
			}
		}

		check("before campaigning", false)
		leading := make(chan *fence.Lease)
		stuck := make(chan struct{})
		lead := make(chan error, 1)
		go func() {
			first := true
			lead <- e.Lead(ctx, func(ctx context.Context, l *fence.Lease) error {
				if !first {
					<-ctx.Done()
					return nil
				}
				first = false
				leading <- l
				<-ctx.Done() // the loss: the leader should stop here, and does not
				<-stuck
				return nil
			})
		}()
		l := <-leading
		check("leading with a valid lease", false)
		go func() { _, _ = follower.Campaign(ctx) }()
		synctest.Wait()
		if err := probe(follower); err != nil {
			probs = append(probs, "a follower, campaigning: health "+err.Error()+"; want healthy")
		}

		<-l.Done() // validity ran out: no renewal was answered
		check("just after the loss, the work still running", false)
		time.Sleep(healthGrace / 2)
		check("within grace of the loss", false)
		time.Sleep(healthGrace / 2)
		check("grace after the loss, the work still running", true)

		close(stuck) // the work stops at last; Lead resigns and campaigns again
		synctest.Wait()
		check("once the work stopped", false)
		cancel()
		<-lead
		time.Sleep(time.Minute) // the follower's term, if it won one, runs out
	})
	return probs
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

// A leader whose renewals stall and whose work does not stop when its
// lease is lost is reported unhealthy once grace has passed, and healthy
// again once its work stops; a follower is healthy.
func TestElectionHealthStalledLeader(t *testing.T) {
	for _, p := range stalledLeader(t, func(e *fence.Election) error { return e.Healthy(healthGrace) }) {
		t.Error(p)
	}
}

// The check can fail: health checks that miss the stuck leader, or that
// report it at once without grace, are each caught.
func TestElectionHealthMutants(t *testing.T) {
	for name, probe := range map[string]func(e *fence.Election) error{
		"process up means healthy": func(*fence.Election) error { return nil },
		"no grace":                 func(e *fence.Election) error { return e.Healthy(0) },
	} {
		if probs := stalledLeader(t, probe); len(probs) == 0 {
			t.Errorf("mutant %q passed the stalled leader's checks", name)
		} else {
			t.Logf("mutant %q: %v", name, probs)
		}
	}
}

// A Campaign's lease that is lost while its caller has not resigned is
// reported; Resign ends the report; a lease the caller released itself is
// no leadership.
func TestElectionHealthCampaign(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := fencemem.New()
		e := fence.New(store, fence.WithTTL(3*time.Second)).Election("leader")
		l, err := e.Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		store.Delete("leader") // the next renewal is refused
		<-l.Done()
		if err := e.Healthy(0); !errors.Is(err, fence.ErrLost) {
			t.Errorf("health of a lost, unresigned term: %v; want ErrLost", err)
		}
		if err := e.Resign(ctx); !errors.Is(err, fence.ErrLost) {
			t.Errorf("Resign of a lost term: %v; want ErrLost", err)
		}
		if err := e.Healthy(0); err != nil {
			t.Errorf("health after Resign: %v; want healthy", err)
		}
		l, err = e.Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if err := e.Healthy(0); err != nil {
			t.Errorf("health after the term's lease was released: %v; want healthy", err)
		}
	})
}
