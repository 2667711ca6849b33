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

// slowResume is fencemem whose Resume answers after delay.
type slowResume struct {
	*fencemem.Store
	delay time.Duration
}

func (d slowResume) Resume(ctx context.Context, req fence.Request, token int64) (fence.Claim, error) {
	time.Sleep(d.delay)
	return d.Store.Resume(ctx, req, token)
}

func TestResumedValidityCountsFromTheRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		const ttl, delay = time.Second, 300 * time.Millisecond
		store := fencemem.New()
		first := fence.New(store, fence.WithTTL(ttl))
		l, err := first.TryAcquire(ctx, "k", fence.WithoutRenewal())
		if err != nil {
			t.Fatal(err)
		}
		c := fence.New(slowResume{store, delay}, fence.WithTTL(ttl))
		time.Sleep(ttl / 2)
		sent := time.Now()
		r, err := c.TryAcquire(ctx, "k", fence.WithResume(l.Owner(), l.Token()), fence.WithoutRenewal())
		if err != nil {
			t.Fatal(err)
		}
		if r.Token() != l.Token() || r.Owner() != l.Owner() {
			t.Errorf("resumed token %d owner %q; want %d %q", r.Token(), r.Owner(), l.Token(), l.Owner())
		}
		margin := ttl/50 + 5*time.Millisecond // the default drift margin
		if got, want := r.ValidFor(), ttl-margin-time.Since(sent); got != want {
			t.Errorf("resumed lease valid for %v; want %v: the TTL less the margin from the resume's send time", got, want)
		}
		<-r.Done()
		if lost := time.Since(sent); lost != ttl-margin {
			t.Errorf("resumed lease lost %v after the resume was sent; want %v", lost, ttl-margin)
		}
		_ = r.Release(ctx)
		_ = l.Release(ctx)
	})
}

func TestResumeRefusals(t *testing.T) {
	ctx := t.Context()
	store := fencemem.New()
	c := fence.New(store)
	for name, opt := range map[string]fence.AcquireOption{
		"empty owner":          fence.WithResume("", 1),
		"owner with a newline": fence.WithResume("a\nb", 1),
		"zero token":           fence.WithResume("a", 0),
		"negative token":       fence.WithResume("a", -3),
	} {
		if _, err := c.TryAcquire(ctx, "k", opt); !errors.Is(err, fence.ErrInvalidOption) {
			t.Errorf("resume with %s: %v; want ErrInvalidOption", name, err)
		}
	}
	if _, err := c.TryAcquire(ctx, "k", fence.WithResume("a", 1)); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("resume of a free key: %v; want ErrNotHeld", err)
	}
	l, err := c.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	var held *fence.HeldError
	if _, err := c.Acquire(ctx, "k", fence.WithResume("a", l.Token())); !errors.As(err, &held) || held.Holder == nil || held.Holder.Owner != l.Owner() {
		t.Errorf("Acquire resuming another owner's lease: %v; want a *HeldError naming the holder, at once", err)
	}
	plain := fence.New(plainDriver{store})
	if _, err := plain.TryAcquire(ctx, "k", fence.WithResume(l.Owner(), l.Token())); !errors.Is(err, fence.ErrUnsupported) {
		t.Errorf("resume on a driver without Resumer: %v; want ErrUnsupported", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
}
