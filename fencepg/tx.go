package fencepg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencing/fence"
)

// ErrReentrant is returned by TxLocker when the transaction's session
// already holds the key's advisory lock: PostgreSQL would grant it again,
// but a fence lock is never reentrant.
var ErrReentrant = errors.New("fencepg: this session already holds the key's advisory lock")

// TxLocker is transaction mode: it takes a key's advisory lock inside the
// caller's transaction (pg_advisory_xact_lock) and bumps the key's token
// in the same transaction. The lock ends with the transaction, at commit
// or rollback; there is nothing to renew or release, so TxLocker is not a
// fence.Driver.
//
// Choose transaction mode when the work the lock protects is done in that
// same transaction: then the lock, the token bump and the work commit or
// roll back together. The token belongs to the transaction too: if it
// rolls back, so does the bump, and the next holder may be given the same
// token. Use it for writes inside the transaction (or commit before using
// it elsewhere).
//
// It shares AdvisoryID and the tokens table with session mode, so the two
// modes exclude each other on a key and their tokens increase together.
// In a REPEATABLE READ or SERIALIZABLE transaction, lock before anything
// else: a token bumped by a transaction that committed after this one's
// snapshot makes PostgreSQL report a serialization failure.
type TxLocker struct {
	ts                 tables
	qMine, qLock, qTry string
}

// NewTxLocker returns a TxLocker. Its options name the tables.
func NewTxLocker(opts ...Option) (*TxLocker, error) {
	_, ts, err := collect(opts, "NewTxLocker")
	if err != nil {
		return nil, err
	}
	T := ts.tokens.quoted
	bump := func(src string) string {
		return `INSERT INTO ` + T + ` AS t (key, lock_id, token, owner, holder_pid, meta, acquired_at)
			SELECT $1, $2, ` + clockToken + `, NULL, pg_backend_pid(), NULL, clock_timestamp() FROM ` + src + `
			ON CONFLICT (key) DO UPDATE
				SET token = ` + nextToken("t.token") + `, owner = NULL, holder_pid = EXCLUDED.holder_pid,
					meta = NULL, acquired_at = EXCLUDED.acquired_at
			RETURNING t.token`
	}
	mine := `EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted AND pid = pg_backend_pid()
		AND classid::bigint = (($2::bigint >> 32) & 4294967295) AND objid::bigint = ($2::bigint & 4294967295) AND objsubid = 1)`
	return &TxLocker{
		ts:    ts,
		qMine: `SELECT ` + mine + ` AND $1::text IS NOT NULL`,
		// The bump reads the latest committed token (ON CONFLICT DO UPDATE
		// does), though the statement's snapshot predates the wait.
		qLock: `WITH lk AS (SELECT pg_advisory_xact_lock($2)) ` + bump("lk"),
		qTry: `WITH lk AS (SELECT CASE WHEN ` + mine + ` THEN NULL ELSE pg_try_advisory_xact_lock($2) END AS ok),
			up AS (` + bump("lk WHERE lk.ok") + `)
			SELECT lk.ok, (SELECT token FROM up) FROM lk`,
	}, nil
}

// Lock takes key's advisory lock in tx, waiting in the server while
// another transaction or session holds it, and returns the key's next
// token. The wait ends with ctx (which, as with any statement cut short,
// leaves tx unusable: roll it back) or the server's lock_timeout.
func (l *TxLocker) Lock(ctx context.Context, tx pgx.Tx, key string) (int64, error) {
	if err := fence.ValidateKey(key); err != nil {
		return 0, err
	}
	id := AdvisoryID(key)
	var mine bool
	if err := tx.QueryRow(ctx, l.qMine, key, id).Scan(&mine); err != nil {
		return 0, fmt.Errorf("fencepg: lock %q in transaction: %w", key, err)
	}
	if mine {
		return 0, fmt.Errorf("%w: %q", ErrReentrant, key)
	}
	var token int64
	if err := tx.QueryRow(ctx, l.qLock, key, id).Scan(&token); err != nil {
		return 0, l.err(ctx, tx, key, id, err)
	}
	return token, nil
}

// TryLock is Lock without waiting: if another transaction or session holds
// key, it returns a *fence.HeldError (matching fence.ErrHeld) and tx is
// still usable.
func (l *TxLocker) TryLock(ctx context.Context, tx pgx.Tx, key string) (int64, error) {
	if err := fence.ValidateKey(key); err != nil {
		return 0, err
	}
	id := AdvisoryID(key)
	var (
		ok    *bool
		token *int64
	)
	if err := tx.QueryRow(ctx, l.qTry, key, id).Scan(&ok, &token); err != nil {
		return 0, l.err(ctx, tx, key, id, err)
	}
	switch {
	case ok == nil:
		return 0, fmt.Errorf("%w: %q", ErrReentrant, key)
	case !*ok:
		return 0, &fence.HeldError{Key: key}
	}
	return *token, nil
}

func (l *TxLocker) err(ctx context.Context, tx pgx.Tx, key string, id int64, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return fmt.Errorf("%w: %q maps to %d, which another key already uses", ErrKeyCollision, key, id)
	}
	return fmt.Errorf("fencepg: lock %q in transaction: %w", key, err)
}
