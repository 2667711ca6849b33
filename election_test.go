package fence_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

func TestElectionCampaignResign(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := fencemem.New()
		a := fence.New(store).Election("leader")
		b := fence.New(store).Election("leader")
		if _, err := a.Leader(ctx); !errors.Is(err, fence.ErrNotHeld) {
			t.Errorf("Leader with no leader: %v; want ErrNotHeld", err)
		}
		la, err := a.Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.Campaign(ctx); !errors.Is(err, fence.ErrInvalidOption) {
			t.Errorf("second Campaign while leading: %v; want ErrInvalidOption", err)
		}
		h, err := b.Leader(ctx)
		if err != nil || h.Owner != la.Owner() {
			t.Errorf("Leader = %+v, %v; want owner %q", h, err, la.Owner())
		}
		got := make(chan *fence.Lease, 1)
		go func() {
			lb, err := b.Campaign(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- lb
		}()
		synctest.Wait() // b waits for the key
		select {
		case <-got:
			t.Fatal("second candidate leads while the first does")
		default:
		}
		if err := a.Resign(ctx); err != nil {
			t.Fatal(err)
		}
		lb := <-got
		if lb.Token() <= la.Token() {
			t.Errorf("new term's token %d is not greater than %d", lb.Token(), la.Token())
		}
		if la.Err() == nil {
			t.Errorf("resigned leadership's lease still valid")
		}
		if err := a.Resign(ctx); err != nil {
			t.Errorf("Resign when not leading: %v", err)
		}
		if err := b.Resign(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// Resigning a leadership that was lost reports the loss, whether the
// resign finds it (the store no longer holds the lease) or a renewal
// found it before.
func TestElectionResignReportsLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := fencemem.New()
		// No renewal runs unless the test lets virtual time pass.
		e := fence.New(store, fence.WithTTL(time.Hour)).Election("leader")
		if _, err := e.Campaign(ctx); err != nil {
			t.Fatal(err)
		}
		store.Delete("leader")
		var lost *fence.LostError
		if err := e.Resign(ctx); !errors.As(err, &lost) || lost.Reason != fence.LossRefused {
			t.Errorf("Resign of a leadership the store dropped: %v; want a *LostError (refused)", err)
		}
		if err := e.Resign(ctx); err != nil {
			t.Errorf("Resign when no longer leading: %v; want nil", err)
		}

		l, err := e.Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		store.Delete("leader")
		time.Sleep(time.Hour / 3) // the renewal finds the loss
		synctest.Wait()
		if !errors.Is(l.Err(), fence.ErrLost) {
			t.Fatalf("lease after a refused renewal: %v; want ErrLost", l.Err())
		}
		if err := e.Resign(ctx); !errors.Is(err, fence.ErrLost) {
			t.Errorf("Resign of a leadership lost before: %v; want ErrLost", err)
		}
	})
}

// When fn returns and only the resign finds the leadership lost, Lead
// returns fn's error joined with the loss: not fn's result alone.
func TestElectionLeadReportsLossFoundAtResign(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := fencemem.New()
		e := fence.New(store, fence.WithTTL(time.Hour)).Election("leader")
		runs := 0
		err := e.Lead(ctx, func(context.Context, *fence.Lease) error {
			runs++
			store.Delete("leader")
			return nil
		})
		var lost *fence.LostError
		if !errors.As(err, &lost) || lost.Reason != fence.LossRefused {
			t.Errorf("Lead whose leadership the store dropped: %v; want a *LostError (refused)", err)
		}
		if runs != 1 {
			t.Errorf("fn ran %d times; want once (fn returned: Lead does not campaign again)", runs)
		}
		boom := errors.New("boom")
		err = e.Lead(ctx, func(context.Context, *fence.Lease) error {
			store.Delete("leader")
			return boom
		})
		if !errors.Is(err, boom) || !errors.Is(err, fence.ErrLost) {
			t.Errorf("Lead: %v; want fn's error joined with ErrLost", err)
		}
	})
}

func TestElectionLeadCampaignsAgainAfterLoss(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		store := fencemem.New()
		e := fence.New(store, fence.WithTTL(300*time.Millisecond)).Election("leader")
		var terms []int64
		var causes []error
		var n atomic.Int32
		err := e.Lead(ctx, func(ctx context.Context, l *fence.Lease) error {
			terms = append(terms, l.Token())
			if n.Add(1) == 1 {
				store.Delete("leader") // deposed behind its back
				<-ctx.Done()
				causes = append(causes, context.Cause(ctx))
				return ctx.Err()
			}
			cancel() // second term: stop leading
			<-ctx.Done()
			return nil
		})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Lead: %v; want context.Canceled", err)
		}
		if len(terms) != 2 || terms[1] <= terms[0] {
			t.Errorf("terms %v; want two, with increasing tokens", terms)
		}
		if len(causes) != 1 || !errors.Is(causes[0], fence.ErrLost) {
			t.Errorf("first term's context ended with %v; want the loss", causes)
		}
		if _, err := store.Inspect(context.Background(), "leader"); !errors.Is(err, fence.ErrNotHeld) {
			t.Errorf("Lead left the key held: %v", err)
		}
	})
}

// Leadership lost while ctx ends: Lead's error carries both.
func TestElectionLeadCancelledAfterLossReportsBoth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		store := fencemem.New()
		e := fence.New(store, fence.WithTTL(time.Hour)).Election("leader")
		err := e.Lead(ctx, func(ctx context.Context, l *fence.Lease) error {
			store.Delete("leader")
			cancel()
			return nil
		})
		if !errors.Is(err, context.Canceled) || !errors.Is(err, fence.ErrLost) {
			t.Errorf("Lead: %v; want context.Canceled joined with ErrLost", err)
		}
	})
}

func TestElectionLeadReturnsWhenFunctionDone(t *testing.T) {
	ctx := ctxT(t)
	store := fencemem.New()
	e := fence.New(store).Election("leader")
	boom := errors.New("boom")
	if err := e.Lead(ctx, func(context.Context, *fence.Lease) error { return boom }); !errors.Is(err, boom) || errors.Is(err, fence.ErrLost) {
		t.Errorf("Lead: %v; want fn's error alone", err)
	}
	if _, err := store.Inspect(ctx, "leader"); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Lead did not resign: %v", err)
	}
}

func TestElectionObserve(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		store := fencemem.New()
		c := fence.New(store)
		obs, err := c.Election("leader").Observe(ctx)
		if err != nil {
			t.Fatal(err)
		}
		next := func() fence.Holder {
			t.Helper()
			select {
			case h := <-obs:
				return h
			case <-time.After(5 * time.Second):
				t.Fatal("Observe reported no change")
				return fence.Holder{}
			}
		}
		if h := next(); h.Owner != "" {
			t.Errorf("first observation %+v; want no leader", h)
		}
		e := c.Election("leader")
		l, err := e.Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if h := next(); h.Owner != l.Owner() || h.Token != l.Token() {
			t.Errorf("observed %+v; want the new leader %q", h, l.Owner())
		}
		e.Resign(ctx)
		if h := next(); h.Owner != "" {
			t.Errorf("observed %+v after resign; want no leader", h)
		}
		cancel()
		for range obs {
		}
	})
}
