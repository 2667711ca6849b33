package fencetest_test

import (
	"context"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

// The broken Breakers and Resumers of the table in mutants_test.go.

// breakAnyToken is fencemem whose Break deletes the lease whatever its
// token.
type breakAnyToken struct{ *fencemem.Store }

func (d breakAnyToken) Break(ctx context.Context, key string, _ int64) (fence.Holder, error) {
	return d.Store.Break(ctx, key, 0)
}

func breakIgnoresToken(b *base) fence.Driver { return breakAnyToken{b.store} }

// breakResetToken is fencemem whose Break forgets the key's token
// counter, as a store that keeps the counter in the lease record and
// deletes the record would.
type breakResetToken struct {
	*fencemem.Store
	tk *tokens
}

func (d breakResetToken) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	c, err := d.Store.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return &mutantClaim{Claim: c, token: d.tk.issue(req)}, nil
}

func (d breakResetToken) Break(ctx context.Context, key string, token int64) (fence.Holder, error) {
	h, err := d.Store.Break(ctx, key, token)
	if err == nil {
		d.tk.mu.Lock()
		delete(d.tk.next, d.tk.space(fence.Request{Key: key}))
		d.tk.mu.Unlock()
	}
	return h, err
}

func breakResetsTokens(b *base) fence.Driver {
	return breakResetToken{b.store, &tokens{next: map[string]int64{}}}
}

// resumeAnyToken is fencemem whose Resume compares the owner only.
type resumeAnyToken struct{ *fencemem.Store }

func (d resumeAnyToken) Resume(ctx context.Context, req fence.Request, token int64) (fence.Claim, error) {
	if h, err := d.Store.Inspect(ctx, req.Key); err == nil && h.Owner == req.Owner {
		token = h.Token
	}
	return d.Store.Resume(ctx, req, token)
}

func resumeIgnoresToken(b *base) fence.Driver { return resumeAnyToken{b.store} }

// resumeAnyOwner is fencemem whose Resume compares the token only.
type resumeAnyOwner struct{ *fencemem.Store }

func (d resumeAnyOwner) Resume(ctx context.Context, req fence.Request, token int64) (fence.Claim, error) {
	if h, err := d.Store.Inspect(ctx, req.Key); err == nil && h.Token == token {
		req.Owner = h.Owner
	}
	return d.Store.Resume(ctx, req, token)
}

func resumeIgnoresOwner(b *base) fence.Driver { return resumeAnyOwner{b.store} }

// resumeKeepsExpiry is fencemem whose Resume does not extend the lease.
type resumeKeepsExpiry struct{ *fencemem.Store }

func (d resumeKeepsExpiry) Resume(ctx context.Context, req fence.Request, token int64) (fence.Claim, error) {
	h, err := d.Store.Inspect(ctx, req.Key)
	if err != nil {
		return nil, err
	}
	req.TTL = h.ExpiresIn
	return d.Store.Resume(ctx, req, token)
}

func resumeNotExtended(b *base) fence.Driver { return resumeKeepsExpiry{b.store} }
