package fencepg

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fencing/fence"
)

// Lease mode semaphores keep one row per slot in the kinds table, (kind
// 'semaphore', key, slot 0..limit-1), each with its owner, expiry, token
// and the limit it was granted with, beside the key's counter row (slot
// -1). Acquiring is one round trip: a batch of two statements that
// PostgreSQL runs as one implicit transaction. The first locks the
// counter row, so grants of one semaphore are serialized; the second,
// with a snapshot taken after that lock, finds the live holders, refuses a
// different limit, takes the lowest free or expired slot and bumps the
// counter into its token. Renewal and release compare the slot's owner,
// like a lock's row; a release NOTIFYs waiters on the lock table's
// channel, and waiters also wake at the earliest holder's expiry.

var _ fence.KindSupporter = (*LeaseStore)(nil)

// Supports implements fence.KindSupporter: lease mode does locks and
// semaphores (slot rows). Reader-writer locks are session mode's.
func (d *LeaseStore) Supports(k fence.Kind) bool {
	return k == fence.KindLock || k == fence.KindSemaphore
}

func (d *LeaseStore) semaphoreQueries() {
	K := d.ts.kinds.quoted
	d.qSemLock = `INSERT INTO ` + K + ` AS k (kind, key, slot, token) VALUES ('semaphore', $1, -1, 0)
		ON CONFLICT (kind, key, slot) DO UPDATE SET token = k.token RETURNING k.token`
	d.qSemTake = `WITH live AS (
		SELECT slot, owner, token, meta, lim, expires_at FROM ` + K + `
		WHERE kind = 'semaphore' AND key = $1 AND slot >= 0 AND owner IS NOT NULL AND expires_at > clock_timestamp()
	), free AS (
		SELECT s FROM generate_series(0, $5::integer - 1) s
		WHERE NOT EXISTS (SELECT 1 FROM live WHERE live.slot = s)
			AND NOT EXISTS (SELECT 1 FROM live WHERE live.lim <> $5::integer)
		ORDER BY s LIMIT 1
	), bump AS (
		UPDATE ` + K + ` SET token = ` + nextToken("token") + `
		WHERE kind = 'semaphore' AND key = $1 AND slot = -1 AND EXISTS (SELECT 1 FROM free)
		RETURNING token
	), take AS (
		INSERT INTO ` + K + ` AS k (kind, key, slot, token, owner, expires_at, lim, meta, acquired_at)
		SELECT 'semaphore', $1, free.s, bump.token, $2, clock_timestamp() + $3::bigint * interval '1 microsecond',
			$5::integer, $4, clock_timestamp()
		FROM free, bump
		ON CONFLICT (kind, key, slot) DO UPDATE
			SET token = EXCLUDED.token, owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at,
				lim = EXCLUDED.lim, meta = EXCLUDED.meta, acquired_at = EXCLUDED.acquired_at
		RETURNING k.slot, k.token
	), first AS (
		SELECT owner, token, meta, expires_at FROM live ORDER BY expires_at LIMIT 1
	)
	SELECT (SELECT slot FROM take), (SELECT token FROM take), (SELECT lim FROM live WHERE lim <> $5::integer LIMIT 1),
		first.owner, first.token, first.meta, ceil(extract(epoch FROM first.expires_at - clock_timestamp()) * 1e6)::bigint
	FROM (SELECT 1) one LEFT JOIN first ON true`
	d.qSemExtend = `UPDATE ` + K + ` SET expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond'
		WHERE kind = 'semaphore' AND key = $1 AND slot = $2 AND owner = $3 AND expires_at > clock_timestamp()`
	d.qSemRelease = `WITH r AS (
		UPDATE ` + K + ` SET owner = NULL, meta = NULL
		WHERE kind = 'semaphore' AND key = $1 AND slot = $2 AND owner = $3
		RETURNING expires_at > clock_timestamp() AS live
	)
	SELECT live, pg_notify($4, $5)::text FROM r`
}

// trySlot takes a free slot of the semaphore req.Key in one round trip.
func (d *LeaseStore) trySlot(ctx context.Context, req fence.Request) (fence.Claim, error) {
	b := &pgx.Batch{}
	b.Queue(d.qSemLock, req.Key)
	b.Queue(d.qSemTake, req.Key, req.Owner, micros(req.TTL), metaArg(req.Meta), req.Limit)
	br := d.pool.SendBatch(ctx, b)
	var (
		slot, token, other, firstToken, leftUS *int64
		owner                                  *string
		meta                                   map[string]string
	)
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&slot, &token, &other, &owner, &firstToken, &meta, &leftUS)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return nil, fmt.Errorf("fencepg: acquire semaphore %q: %w", req.Key, err)
	case other != nil:
		return nil, fmt.Errorf("fencepg: acquire semaphore %q: %w: held with limit %d, asked with %d", req.Key, fence.ErrLimitMismatch, *other, req.Limit)
	case slot == nil || token == nil:
		held := &fence.HeldError{Key: req.Key}
		if owner != nil && firstToken != nil && leftUS != nil {
			// The holder whose slot expires first: waiters wake then.
			held.Holder = &fence.Holder{Key: req.Key, Owner: *owner, Token: *firstToken, Meta: meta,
				ExpiresIn: time.Duration(max(*leftUS, 1)) * time.Microsecond}
		}
		return nil, held
	}
	return &slotClaim{d: d, key: req.Key, slot: *slot, owner: req.Owner, token: *token}, nil
}

// slotClaim is one lease mode semaphore slot.
type slotClaim struct {
	d     *LeaseStore
	key   string
	slot  int64
	owner string
	token int64
}

func (c *slotClaim) Token() int64 { return c.token }

func (c *slotClaim) Extend(ctx context.Context, ttl time.Duration) error {
	tag, err := c.d.pool.Exec(ctx, c.d.qSemExtend, c.key, c.slot, c.owner, micros(ttl))
	if err != nil {
		return fmt.Errorf("fencepg: extend semaphore %q: %w", c.key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: semaphore %q: slot %d of %s expired or taken over", fence.ErrNotHeld, c.key, c.slot, c.owner)
	}
	return nil
}

func (c *slotClaim) Release(ctx context.Context) error {
	var live bool
	err := c.d.pool.QueryRow(ctx, c.d.qSemRelease, c.key, c.slot, c.owner, c.d.ts.locks.name, notifyPayload(c.key)).Scan(&live, nil)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: semaphore %q: slot %d no longer held by %s", fence.ErrNotHeld, c.key, c.slot, c.owner)
	case err != nil:
		return fmt.Errorf("fencepg: release semaphore %q: %w", c.key, err)
	case !live:
		return fmt.Errorf("%w: semaphore %q: slot %d of %s had expired", fence.ErrNotHeld, c.key, c.slot, c.owner)
	}
	return nil
}
