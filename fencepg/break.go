package fencepg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/metajson"
)

var (
	_ fence.Breaker = (*LeaseStore)(nil)
	_ fence.Resumer = (*LeaseStore)(nil)
)

// Break implements fence.Breaker in lease mode, in one transaction: it
// locks key's row (SELECT ... FOR UPDATE), and clears its owner if the
// lease is live, or in its lock-delay, and its token is token (any, for
// 0), keeping the token and announcing the release to waiters as a
// release does. Breaking a lease in its lock-delay lifts the delay
// (fence.Breaker). Session mode
// has no Break: its lock belongs to the holder's connection, which only
// pg_terminate_backend could end, and that cannot compare a token.
func (d *LeaseStore) Break(ctx context.Context, key string, token int64) (fence.Holder, error) {
	if err := d.ensureSetup(ctx); err != nil {
		return fence.Holder{}, err
	}
	L := d.ts.locks.quoted
	var h fence.Holder
	live := false // live, or in its lock-delay
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var (
			owner *string
			meta  []byte
			left  int64
		)
		err := tx.QueryRow(ctx, `SELECT owner, token, meta, `+leftUS+`
			FROM `+L+` WHERE key = $1 FOR UPDATE`, key).Scan(&owner, &h.Token, &meta, &left)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil || owner == nil || left <= 0 {
			return err
		}
		h.Key, h.Owner, h.ExpiresIn = key, *owner, time.Duration(left)*time.Microsecond
		live = true
		h.Meta = metajson.Decode(string(meta)) // metadata is informational
		if token != 0 && h.Token != token {
			return nil
		}
		_, err = tx.Exec(ctx, `UPDATE `+L+` SET owner = NULL, meta = NULL WHERE key = $1 AND token = $2
			RETURNING pg_notify('`+d.ts.locks.name+`', $3)::text`, key, h.Token, notifyPayload(key))
		return err
	})
	switch {
	case err != nil:
		return fence.Holder{}, fmt.Errorf("fencepg: break %q: %w", key, err)
	case !live:
		return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
	case token != 0 && h.Token != token:
		return fence.Holder{}, &fence.HeldError{Key: key, Holder: &h}
	}
	return h, nil
}

// Resume implements fence.Resumer in lease mode: one UPDATE that extends
// key's row only if its owner and token are req.Owner and token and it
// has not expired. The row keeps the lock-delay it was acquired with; a
// lease in its lock-delay has ended (ErrNotHeld), and the delay runs on.
func (d *LeaseStore) Resume(ctx context.Context, req fence.Request, token int64) (_ fence.Claim, err error) {
	defer func() { err = markUnavailable(ctx, err) }()
	if err := d.ensureSetup(ctx); err != nil {
		return nil, err
	}
	if req.Kind != fence.KindLock {
		return nil, fmt.Errorf("fencepg: resume %q: %w: %s", req.Key, fence.ErrUnsupported, req.Kind)
	}
	tag, err := d.pool.Exec(ctx, `UPDATE `+d.ts.locks.quoted+`
		SET expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond', meta = $4
		WHERE key = $1 AND owner = $2 AND token = $5 AND expires_at > clock_timestamp()`,
		req.Key, req.Owner, micros(req.TTL), metaArg(req.Meta), token)
	if err != nil {
		return nil, fmt.Errorf("fencepg: resume %q: %w", req.Key, err)
	}
	if tag.RowsAffected() == 1 {
		return &leaseClaim{d: d, key: req.Key, owner: req.Owner, token: token}, nil
	}
	hs, err := d.holders(ctx, d.qInspect, req.Key)
	switch {
	case err != nil:
		return nil, fmt.Errorf("fencepg: resume %q: %w", req.Key, err)
	case len(hs) == 0:
		return nil, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, req.Key)
	case hs[0].Owner == req.Owner && hs[0].Token == token:
		// Its own lease, not live (the UPDATE found it so), still blocking:
		// in its lock-delay.
		return nil, fmt.Errorf("%w: %q: the lease of %s expired; its lock-delay runs for %v",
			fence.ErrNotHeld, req.Key, req.Owner, hs[0].ExpiresIn)
	}
	return nil, &fence.HeldError{Key: req.Key, Holder: &hs[0]}
}
