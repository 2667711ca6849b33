package fence_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

func TestElectionCampaignResign(t *testing.T) {
	ctx := ctxT(t)
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
	select {
	case <-got:
		t.Fatal("second candidate leads while the first does")
	case <-time.After(100 * time.Millisecond):
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
}

func TestElectionLeadCampaignsAgainAfterLoss(t *testing.T) {
	ctx, cancel := context.WithCancel(ctxT(t))
	store := fencemem.New()
	e := fence.New(store, fence.WithTTL(300*time.Millisecond)).Election("leader")
	var terms []int64
	var n atomic.Int32
	err := e.Lead(ctx, func(ctx context.Context, l *fence.Lease) error {
		terms = append(terms, l.Token())
		if n.Add(1) == 1 {
			store.Delete("leader") // deposed behind its back
			<-ctx.Done()
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
	if _, err := store.Inspect(context.Background(), "leader"); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Lead left the key held: %v", err)
	}
}

func TestElectionLeadReturnsWhenFunctionDone(t *testing.T) {
	ctx := ctxT(t)
	store := fencemem.New()
	e := fence.New(store).Election("leader")
	boom := errors.New("boom")
	if err := e.Lead(ctx, func(context.Context, *fence.Lease) error { return boom }); !errors.Is(err, boom) {
		t.Errorf("Lead: %v; want fn's error", err)
	}
	if _, err := store.Inspect(ctx, "leader"); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Lead did not resign: %v", err)
	}
}

func TestElectionObserve(t *testing.T) {
	ctx, cancel := context.WithCancel(ctxT(t))
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
}
