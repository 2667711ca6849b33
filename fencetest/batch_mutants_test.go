package fencetest_test

import (
	"context"
	"errors"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

// The broken drivers of BatchExtender's rules, listed in broken
// (mutants_test.go).

// batchMutant is fencemem with its ExtendBatch replaced.
type batchMutant struct {
	*fencemem.Store
	extendBatch func(ctx context.Context, claims []fence.Claim, ttls []time.Duration) []error
}

func (m *batchMutant) ExtendBatch(ctx context.Context, claims []fence.Claim, ttls []time.Duration) []error {
	return m.extendBatch(ctx, claims, ttls)
}

// batchRefusalSpreads refuses every claim of a batch in which one is
// refused.
func batchRefusalSpreads(b *base) fence.Driver {
	return &batchMutant{Store: b.store, extendBatch: func(ctx context.Context, claims []fence.Claim, ttls []time.Duration) []error {
		errs := b.store.ExtendBatch(ctx, claims, ttls)
		for _, err := range errs {
			if errors.Is(err, fence.ErrNotHeld) {
				for i := range errs {
					errs[i] = err
				}
				break
			}
		}
		return errs
	}}
}

// batchExtendsNothing reports every claim extended and extends none.
func batchExtendsNothing(b *base) fence.Driver {
	return &batchMutant{Store: b.store, extendBatch: func(ctx context.Context, claims []fence.Claim, ttls []time.Duration) []error {
		return make([]error, len(claims))
	}}
}

// batchDropsResults returns one result short.
func batchDropsResults(b *base) fence.Driver {
	return &batchMutant{Store: b.store, extendBatch: func(ctx context.Context, claims []fence.Claim, ttls []time.Duration) []error {
		return b.store.ExtendBatch(ctx, claims, ttls)[1:]
	}}
}
