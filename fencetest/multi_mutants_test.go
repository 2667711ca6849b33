package fencetest_test

import (
	"context"
	"errors"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

// The broken drivers of AcquireAll's and WithLockDelay's rules, listed in
// broken (mutants_test.go).

// multiMutant is fencemem with its TryAcquireAll replaced.
type multiMutant struct {
	*fencemem.Store
	tryAll func(ctx context.Context, reqs []fence.Request) ([]fence.Claim, error)
}

func (m *multiMutant) TryAcquireAll(ctx context.Context, reqs []fence.Request) ([]fence.Claim, error) {
	return m.tryAll(ctx, reqs)
}

// multiGrantsSome takes the keys one by one in TryAcquireAll and, at a
// held one, reports it held but keeps those it took.
func multiGrantsSome(b *base) fence.Driver {
	return &multiMutant{Store: b.store, tryAll: func(ctx context.Context, reqs []fence.Request) ([]fence.Claim, error) {
		var claims []fence.Claim
		for _, req := range reqs {
			c, err := b.store.TryAcquire(ctx, req)
			var held *fence.HeldError
			if errors.As(err, &held) {
				continue // the others stay taken
			}
			if err != nil {
				return nil, err
			}
			claims = append(claims, c)
		}
		if len(claims) < len(reqs) {
			return nil, &fence.HeldError{Key: reqs[len(claims)].Key}
		}
		return claims, nil
	}}
}

// delayIgnored says it keeps a lock-delay and drops it.
type delayIgnored struct{ *fencemem.Store }

func (d delayIgnored) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	req.LockDelay = 0
	return d.Store.TryAcquire(ctx, req)
}

func (d delayIgnored) TryAcquireAll(ctx context.Context, reqs []fence.Request) ([]fence.Claim, error) {
	for i := range reqs {
		reqs[i].LockDelay = 0
	}
	return d.Store.TryAcquireAll(ctx, reqs)
}

func lockDelayIgnored(b *base) fence.Driver { return delayIgnored{b.store} }
