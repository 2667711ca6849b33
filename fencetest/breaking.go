package fencetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing/fence"
)

// breaking checks Breaker: a break with a stale token changes nothing; a
// break with the holder's token frees the key, the broken holder's next
// renewal is refused, the next token is greater, and a guard refuses the
// broken holder's late write.
func (s *suite) breaking(t *testing.T) {
	if _, ok := s.driver(t).(fence.Breaker); !ok {
		t.Skip("the driver is not a fence.Breaker")
	}
	ctx := s.ctx(t)
	a, b, op := s.client(t), s.client(t), s.client(t)
	key := s.key(t, "k")

	if _, err := op.Break(ctx, key, 1); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Break of a free key: %v; want ErrNotHeld", err)
	}
	if _, err := op.Break(ctx, key, 0, fence.BreakAnyHolder()); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Break of a free key, any holder: %v; want ErrNotHeld", err)
	}
	earlier := mustAcquire(t, ctx, a, key)
	stale := earlier.Token()
	mustRelease(t, ctx, earlier)
	l := mustAcquire(t, ctx, a, key)
	if _, err := op.Break(ctx, key, 0); !errors.Is(err, fence.ErrInvalidOption) {
		t.Errorf("Break with token 0 without BreakAnyHolder: %v; want ErrInvalidOption", err)
	}

	// A stale token: an earlier holder's, and one never issued yet.
	before := s.inspectHolder(t, ctx, op, key)
	for _, tok := range []int64{stale, l.Token() + 1} {
		_, err := op.Break(ctx, key, tok)
		var held *fence.HeldError
		if !errors.As(err, &held) {
			t.Errorf("Break(token %d) of the key held with token %d: %v; want a *HeldError: a break with a stale token changes nothing",
				tok, l.Token(), err)
		} else if h := held.Holder; h != nil && h.Token != 0 && h.Token != l.Token() {
			t.Errorf("Break(token %d) refused naming token %d; the holder's is %d", tok, h.Token, l.Token())
		}
	}
	if err := l.Renew(ctx); err != nil {
		t.Errorf("holder's Renew after breaks with a stale token: %v; a break with a stale token changes nothing", err)
	}
	expectHeld(t, ctx, b, key, "after breaks with a stale token")
	if after := s.inspectHolder(t, ctx, op, key); before != nil && after != nil &&
		(after.Owner != before.Owner || after.Token != before.Token) {
		t.Errorf("Inspect after breaks with a stale token: owner %q token %d; was owner %q token %d",
			after.Owner, after.Token, before.Owner, before.Token)
	}

	// The holder's token.
	var g fence.MemoryGuard
	const res = "resource"
	if err := g.Admit(ctx, res, l.Token()); err != nil {
		t.Fatalf("guard refused the holder's write: %v", err)
	}
	broken, err := op.Break(ctx, key, l.Token())
	if err != nil {
		t.Fatalf("Break(token %d) of the key held with it: %v", l.Token(), err)
	}
	if broken.Token != l.Token() || broken.Key != key || (broken.Owner != "" && broken.Owner != l.Owner()) {
		t.Errorf("Break returned %+v; want key %q, token %d, owner %q", broken, key, l.Token(), l.Owner())
	}
	l2, err := b.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire after the break: %v; a break frees the key at once", err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token after the break %d is not greater than the broken %d", l2.Token(), l.Token())
	}
	if err := l.Renew(ctx); !errors.Is(err, fence.ErrLost) {
		t.Errorf("broken holder's Renew: %v; want ErrLost", err)
	}
	if err := g.Admit(ctx, res, l2.Token()); err != nil {
		t.Errorf("guard refused the new holder's write: %v", err)
	}
	if err := g.Admit(ctx, res, l.Token()); !errors.Is(err, fence.ErrStale) {
		t.Errorf("guard admitted the broken holder's late write: %v; want ErrStale", err)
	}
	if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
		t.Errorf("broken holder's Release: %v; want ErrLost", err)
	}
	if err := l2.Renew(ctx); err != nil {
		t.Errorf("new holder's Renew after the broken holder's Release: %v", err)
	}

	// Any holder, and a guard advanced by the break.
	var g2 fence.MemoryGuard
	if err := g2.Admit(ctx, res, l2.Token()); err != nil {
		t.Fatalf("guard refused the holder's write: %v", err)
	}
	broken, err = op.Break(ctx, key, 0, fence.BreakAnyHolder(), fence.AdvanceGuard(&g2, res))
	if err != nil {
		t.Fatalf("Break(any holder): %v", err)
	}
	if broken.Token != l2.Token() {
		t.Errorf("Break(any holder) returned token %d; the holder's is %d", broken.Token, l2.Token())
	}
	if err := g2.Admit(ctx, res, l2.Token()); !errors.Is(err, fence.ErrStale) {
		t.Errorf("guard advanced by the break admitted the broken holder's write: %v; want ErrStale", err)
	}
	l3 := mustAcquire(t, ctx, a, key)
	if l3.Token() <= l2.Token() {
		t.Errorf("token after the second break %d is not greater than the broken %d", l3.Token(), l2.Token())
	}
	if err := g2.Admit(ctx, res, l3.Token()); err != nil {
		t.Errorf("guard advanced by the break refused the next holder's write: %v", err)
	}
	if err := l2.Renew(ctx); !errors.Is(err, fence.ErrLost) {
		t.Errorf("second broken holder's Renew: %v; want ErrLost", err)
	}
	_ = l2.Release(ctx)
	mustRelease(t, ctx, l3)
}

// resuming checks Resumer: the lease's owner and token take it back,
// keeping the token and extending it; another owner or token, or a lease
// that expired, is refused.
func (s *suite) resuming(t *testing.T) {
	drv := s.driver(t)
	if _, ok := drv.(fence.Resumer); !ok {
		t.Skip("the driver is not a fence.Resumer")
	}
	ctx := s.ctx(t)
	b, c := s.client(t), s.client(t)
	key := s.key(t, "k")
	ttl := s.cfg.TTL

	// The process that held it, gone without a release. Before each
	// step it renews once more (as it would have), so that a slow
	// machine does not let it expire under the step; a step that took
	// most of the TTL anyway proves nothing and is done again.
	req := s.request(key, fence.KindLock)
	old, err := grantOnce(ctx, drv, req)
	if err != nil {
		t.Fatalf("driver TryAcquire: %v", err)
	}
	tok := old.Token()
	renewed := func() time.Time {
		t.Helper()
		at := time.Now()
		if err := old.Extend(ctx, ttl); err != nil {
			t.Fatalf("driver Extend of the holder: %v", err)
		}
		return at
	}
	tooSlow := func(since time.Time, err error) bool {
		if errors.Is(err, fence.ErrNotHeld) && time.Since(since) > ttl*8/10 {
			t.Logf("a step took %v of a TTL of %v; again", time.Since(since), ttl)
			return true
		}
		return false
	}

	wrong := map[string]fence.AcquireOption{
		"another owner":        fence.WithResume("fencetest-"+randomHex(16), tok),
		"a later token":        fence.WithResume(req.Owner, tok+1),
		"another owner, token": fence.WithResume(req.Owner+"x", tok+1),
	}
	if tok > 1 {
		wrong["an earlier token"] = fence.WithResume(req.Owner, tok-1)
	}
	for name, opt := range wrong {
		for attempt := 0; ; attempt++ {
			at := renewed()
			l, err := c.TryAcquire(ctx, key, opt)
			if attempt < 3 && tooSlow(at, err) {
				continue
			}
			if !errors.Is(err, fence.ErrHeld) {
				t.Errorf("resume with %s: %v; want ErrHeld: a wrong token or owner is refused", name, err)
				if err == nil {
					_ = l.Release(ctx)
					t.FailNow()
				}
			}
			break
		}
	}

	var (
		l          *fence.Lease
		sent, last time.Time
	)
	for attempt := 0; ; attempt++ {
		last = renewed()
		time.Sleep(ttl / 2)
		sent = time.Now()
		l, err = b.TryAcquire(ctx, key, fence.WithResume(req.Owner, tok), fence.WithoutRenewal())
		if attempt < 3 && tooSlow(last, err) {
			continue
		}
		if err != nil {
			t.Fatalf("resume with the holder's owner and token: %v", err)
		}
		break
	}
	if l.Token() != tok || l.Owner() != req.Owner {
		t.Errorf("resumed lease: token %d, owner %q; want %d, %q", l.Token(), l.Owner(), tok, req.Owner)
	}
	// Past the holder's last renewal's TTL, within the resume's: still
	// held.
	time.Sleep(time.Until(last.Add(ttl + ttl/4)))
	kept := false
	if time.Since(sent) < ttl-ttl/10 {
		kept = expectHeldBefore(t, ctx, c, key, "after the old grant's TTL, within the resume's: the resume must extend the lease", sent.Add(ttl-ttl/10))
	} else {
		t.Logf("too late (%v after the resume) to check that the resume extended the lease", time.Since(sent))
	}
	if kept {
		if err := l.Renew(ctx); err != nil {
			t.Errorf("resumed lease's Renew: %v", err)
		}
		mustRelease(t, ctx, l)
	}
	next := mustAcquire(t, ctx, c, key)
	if next.Token() <= tok {
		t.Errorf("token after the resumed lease %d is not greater than its %d", next.Token(), tok)
	}
	mustRelease(t, ctx, next)

	// A lease that expired is not resumed.
	req = s.request(key, fence.KindLock)
	if old, err = grantOnce(ctx, drv, req); err != nil {
		t.Fatalf("driver TryAcquire: %v", err)
	}
	tok = old.Token()
	deadline := time.Now().Add(ttl + s.slack())
	for {
		time.Sleep(ttl / 4)
		l, err := c.TryAcquire(ctx, key, fence.WithResume(req.Owner, tok))
		if errors.Is(err, fence.ErrNotHeld) {
			break
		}
		if err == nil {
			_ = l.Release(ctx)
		}
		if time.Now().After(deadline) {
			t.Fatalf("resume of a lease %v after its TTL: %v; want ErrNotHeld", time.Since(deadline.Add(-s.slack())), err)
		}
	}
	_ = old.Release(ctx) // expired: nothing to release, or its leftovers
}

// inspectHolder returns key's holder where the driver can tell, nil
// otherwise.
func (s *suite) inspectHolder(t *testing.T, ctx context.Context, c *fence.Client, key string) *fence.Holder {
	t.Helper()
	if _, ok := c.Driver().(fence.Inspector); !ok {
		return nil
	}
	h, err := c.Inspect(ctx, key)
	if err != nil {
		t.Errorf("Inspect(%q): %v", key, err)
		return nil
	}
	return &h
}
