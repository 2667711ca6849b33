package fencepg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/tokenrule"
)

// Querier runs a statement returning one row: pgx.Tx, *pgx.Conn,
// *pgxpool.Pool and *pgxpool.Conn all are.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Guard is the resource side of fencing in PostgreSQL: it checks a
// fencing token against the highest one admitted for a resource and
// records it, in one statement inside the caller's transaction, so the
// check is atomic with the write that follows it in the same transaction.
// The guard row stays locked until the transaction ends, so a concurrent
// writer with a lower token waits and is then refused.
//
// The default rule admits token >= highest (one holder may write many
// times with its token); Strict() admits only token > highest.
type Guard struct {
	table   table
	strict  bool
	q       string
	metrics fence.GuardObserver
}

// NewGuard returns a guard over the guard table (see Tables and Setup).
func NewGuard(opts ...Option) (*Guard, error) {
	o, ts, err := collect(opts, "NewGuard", "Strict", "WithGuardMetrics")
	if err != nil {
		return nil, err
	}
	G := ts.guard.quoted
	cmp := "<="
	if o.strict {
		cmp = "<"
	}
	return &Guard{table: ts.guard, strict: o.strict, metrics: o.guardMetrics, q: `WITH up AS (
		INSERT INTO ` + G + ` AS g (resource, token) VALUES ($1, $2)
		ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE g.token ` + cmp + ` EXCLUDED.token
		RETURNING token
	)
	SELECT true, token FROM up
	UNION ALL
	SELECT false, token FROM ` + G + ` WHERE resource = $1 AND NOT EXISTS (SELECT 1 FROM up)`}, nil
}

// Admit records token for resource in q's transaction and returns nil, or
// returns a *fence.StaleError (matching fence.ErrStale) if token is lower
// than the highest admitted (not higher, for a strict guard). A token <= 0
// is refused with fence.ErrInvalidToken. Do the guarded write in the same
// transaction, after Admit, and commit.
func (g *Guard) Admit(ctx context.Context, q Querier, resource string, token int64) error {
	if err := tokenrule.Check(resource, token); err != nil {
		return err
	}
	err := g.admit(ctx, q, resource, token)
	fence.ObserveGuard(ctx, g.metrics, resource, token, err)
	return err
}

func (g *Guard) admit(ctx context.Context, q Querier, resource string, token int64) error {
	var (
		ok      bool
		highest int64
	)
	err := q.QueryRow(ctx, g.q, resource, token).Scan(&ok, &highest)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		// Refused, by a row committed after this statement's snapshot.
		return &fence.StaleError{Resource: resource, Token: token, Strict: g.strict}
	case err != nil:
		return fmt.Errorf("fencepg: guard %q: %w", resource, err)
	case !ok:
		return &fence.StaleError{Resource: resource, Token: token, Highest: highest, Strict: g.strict}
	}
	return nil
}

// On returns a fence.Guard that admits each token in its own statement on
// q (typically a *pgxpool.Pool): for checks that are not part of a
// transaction, such as the fencehttp middleware.
func (g *Guard) On(q Querier) fence.Guard { return queryGuard{g, q} }

type queryGuard struct {
	g *Guard
	q Querier
}

func (qg queryGuard) Admit(ctx context.Context, resource string, token int64) error {
	return qg.g.Admit(ctx, qg.q, resource, token)
}
