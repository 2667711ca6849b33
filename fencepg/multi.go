package fencepg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fencing/fence"
)

var _ fence.MultiAcquirer = (*LeaseStore)(nil)

// TryAcquireAll implements fence.MultiAcquirer in one transaction: the
// acquire statement of each key, in the order given (sorted, so that two
// such transactions lock rows in the same order and never deadlock),
// sent as one batch; committed only if every key was granted, rolled back
// otherwise, so that nothing changes, tokens included. Each key's
// statement keeps its own request's lock-delay, as TryAcquire does.
func (d *LeaseStore) TryAcquireAll(ctx context.Context, reqs []fence.Request) (_ []fence.Claim, err error) {
	defer func() { err = markUnavailable(ctx, err) }()
	if err := d.ensureSetup(ctx); err != nil {
		return nil, err
	}
	for _, req := range reqs {
		if req.Kind != fence.KindLock || req.LockDelay < 0 {
			return nil, fmt.Errorf("fencepg: acquire all: %w: %s, lock-delay %v", fence.ErrUnsupported, req.Kind, req.LockDelay)
		}
	}
	tx, err := d.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("fencepg: acquire all: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) // after Commit, a no-op
	b := &pgx.Batch{}
	for _, req := range reqs {
		b.Queue(d.qAcquire, req.Key, req.Owner, micros(req.TTL), metaArg(req.Meta), micros(req.LockDelay))
	}
	br := tx.SendBatch(ctx, b)
	claims := make([]fence.Claim, 0, len(reqs))
	held := ""
	for _, req := range reqs {
		c := &leaseClaim{d: d, key: req.Key, owner: req.Owner}
		err := br.QueryRow().Scan(&c.token)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			if held == "" {
				held = req.Key
			}
		case err != nil:
			br.Close()
			return nil, fmt.Errorf("fencepg: acquire all: %q: %w", req.Key, err)
		}
		claims = append(claims, c)
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("fencepg: acquire all: %w", err)
	}
	if held != "" {
		if err := tx.Rollback(ctx); err != nil {
			return nil, fmt.Errorf("fencepg: acquire all: %w", err)
		}
		return nil, d.heldError(ctx, held)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("fencepg: acquire all: %w", err)
	}
	return claims, nil
}
