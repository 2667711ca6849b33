package fencesqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/metajson"
)

var (
	_ fence.Breaker = (*Store)(nil)
	_ fence.Resumer = (*Store)(nil)
)

// qBreak: ?1 is the key, ?2 the token. qResume: ?1 is the key, ?2 the
// owner, ?3 the time the transaction judges by, ?4 the new expiry, ?5
// the metadata, ?6 the token.
const (
	qBreak  = `UPDATE ` + Table + ` SET owner = NULL, meta = NULL WHERE key = ?1 AND token = ?2`
	qResume = `UPDATE ` + Table + ` SET expires_us = ?4, meta = ?5
		WHERE key = ?1 AND owner = ?2 AND expires_us > ?3 AND token = ?6`
)

// Break implements fence.Breaker in one write transaction: it reads
// key's holder and clears it if its lease is live, or in its lock-delay,
// and its token is token (any, for 0), keeping the token in the row.
// Breaking a lease in its lock-delay lifts the delay (fence.Breaker).
func (s *Store) Break(ctx context.Context, key string, token int64) (fence.Holder, error) {
	var (
		h      *fence.Holder
		broken bool
	)
	err := s.write(ctx, func(tx *sql.Tx, now int64) error {
		var err error
		h, _, err = holder(ctx, tx, key, now)
		if err != nil || h == nil || (token != 0 && h.Token != token) {
			return err
		}
		broken = true
		_, err = tx.ExecContext(ctx, qBreak, key, h.Token)
		return err
	})
	switch {
	case err != nil:
		return fence.Holder{}, fmt.Errorf("fencesqlite: break %q: %w", key, err)
	case broken:
		return *h, nil
	case h != nil:
		return fence.Holder{}, &fence.HeldError{Key: key, Holder: h}
	}
	return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
}

// Resume implements fence.Resumer in one transaction: it extends key's
// row if its owner and token are req.Owner and token and its lease is
// live. The row keeps the lock-delay it was acquired with. A lease in
// its lock-delay has ended: ErrNotHeld, and the delay runs on.
func (s *Store) Resume(ctx context.Context, req fence.Request, token int64) (fence.Claim, error) {
	if req.Kind != fence.KindLock {
		return nil, fmt.Errorf("fencesqlite: resume %q: %w: %s", req.Key, fence.ErrUnsupported, req.Kind)
	}
	var meta any
	if len(req.Meta) > 0 {
		meta = metajson.Encode(req.Meta)
	}
	var (
		h    *fence.Holder
		live bool
	)
	err := s.write(ctx, func(tx *sql.Tx, now int64) error {
		res, err := tx.ExecContext(ctx, qResume, req.Key, req.Owner, now, now+micros(req.TTL), meta, token)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 1 {
			return err
		}
		if h, live, err = holder(ctx, tx, req.Key, now); err == nil {
			err = errHeld
		}
		return err
	})
	ended := h != nil && !live && h.Owner == req.Owner && h.Token == token
	switch {
	case errors.Is(err, errHeld) && ended:
		return nil, fmt.Errorf("%w: %q: the lease of %s expired; its lock-delay runs for %v",
			fence.ErrNotHeld, req.Key, req.Owner, h.ExpiresIn)
	case errors.Is(err, errHeld) && h != nil:
		return nil, &fence.HeldError{Key: req.Key, Holder: h}
	case errors.Is(err, errHeld):
		return nil, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, req.Key)
	case err != nil:
		return nil, fmt.Errorf("fencesqlite: resume %q: %w", req.Key, err)
	}
	return &claim{s: s, key: req.Key, owner: req.Owner, token: token}, nil
}
