// Package fencesql is the resource side of fencing for databases reached
// through database/sql: a Guard checks a write's fencing token against the
// highest token admitted for the resource and records it, inside the
// caller's transaction, so that the check and the write commit together.
// The guard's row for the resource stays locked until the transaction
// ends, so a concurrent writer with a lower token waits, then is refused.
//
//	tx, _ := db.BeginTx(ctx, nil)
//	defer tx.Rollback()
//	if err := guard.Admit(ctx, tx, "invoice/42", lease.Token()); err != nil {
//		return err // errors.Is(err, fence.ErrStale): a newer holder has written
//	}
//	// ... the write, in tx ...
//	return tx.Commit()
//
// Dialects: PostgreSQL, MySQL/MariaDB and SQLite. The default rule admits
// token >= highest (a holder may write many times with its token); Strict
// admits only token > highest.
//
// Where the protected data is one row, a fenced column does the same
// without a guard table; see docs/guards.md:
//
//	UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2
//
// and zero rows affected means the token was stale.
package fencesql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/tokenrule"
)

// Dialect selects the SQL a Guard speaks.
type Dialect string

// The dialects.
const (
	Postgres Dialect = "postgres"
	MySQL    Dialect = "mysql" // MySQL 8 and MariaDB 10.5+
	SQLite   Dialect = "sqlite"
)

// DefaultTable is the guard table's default name.
const DefaultTable = "fence_guard"

// Querier runs statements: *sql.Tx, *sql.Conn and *sql.DB all are. Admit
// is atomic with the caller's write only when both run in one
// transaction.
type Querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// Option configures a Guard.
type Option func(*options)

type options struct {
	table   string
	strict  bool
	metrics fence.GuardObserver
}

// WithTable sets the guard table's name: letters, digits and underscores,
// optionally qualified by a schema or database ("app.fence_guard"). Names
// are validated and quoted, never interpolated unchecked.
func WithTable(name string) Option { return func(o *options) { o.table = name } }

// Strict makes the guard admit only tokens above the highest admitted.
func Strict() Option { return func(o *options) { o.strict = true } }

// WithMetrics tells m the guard's admissions and stale refusals
// (fenceotel.NewGuardMetrics counts them, and adds an event to the
// caller's span on each refusal). An admission is reported when Admit
// admits, whether or not the caller's transaction then commits.
func WithMetrics(m fence.GuardObserver) Option { return func(o *options) { o.metrics = m } }

// Guard checks and records fencing tokens in a guard table.
type Guard struct {
	dialect Dialect
	strict  bool
	metrics fence.GuardObserver
	create  string
	admit   string // Postgres and SQLite: the one-statement check-and-record
	ensure  string // MySQL: make the resource's row exist, locked
	lock    string // MySQL: read the highest token, locked
	record  string // MySQL: record the token
	highest string
}

var identPart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// New returns a guard for dialect.
func New(dialect Dialect, opts ...Option) (*Guard, error) {
	o := options{table: DefaultTable}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.table == "" {
		o.table = DefaultTable
	}
	q := `"`
	if dialect == MySQL {
		q = "`"
	}
	parts := strings.Split(o.table, ".")
	if len(parts) > 2 {
		return nil, fmt.Errorf("%w: fencesql: table name %q: at most schema.table", fence.ErrInvalidOption, o.table)
	}
	for i, p := range parts {
		if !identPart.MatchString(p) {
			return nil, fmt.Errorf("%w: fencesql: table name %q: letters, digits and underscores, not starting with a digit",
				fence.ErrInvalidOption, o.table)
		}
		parts[i] = q + p + q
	}
	G := strings.Join(parts, ".")
	cmp := "<="
	if o.strict {
		cmp = "<"
	}
	g := &Guard{dialect: dialect, strict: o.strict, metrics: o.metrics}
	switch dialect {
	case Postgres:
		g.create = `CREATE TABLE IF NOT EXISTS ` + G + ` (resource text PRIMARY KEY, token bigint NOT NULL)`
		g.admit = `INSERT INTO ` + G + ` AS g (resource, token) VALUES ($1, $2)
			ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token WHERE g.token ` + cmp + ` EXCLUDED.token
			RETURNING token`
		g.highest = `SELECT token FROM ` + G + ` WHERE resource = $1`
	case SQLite:
		g.create = `CREATE TABLE IF NOT EXISTS ` + G + ` (resource TEXT PRIMARY KEY, token INTEGER NOT NULL)`
		g.admit = `INSERT INTO ` + G + ` AS g (resource, token) VALUES (?, ?)
			ON CONFLICT (resource) DO UPDATE SET token = excluded.token WHERE g.token ` + cmp + ` excluded.token
			RETURNING token`
		g.highest = `SELECT token FROM ` + G + ` WHERE resource = ?`
	case MySQL:
		// No RETURNING, and affected-row counts depend on the client's
		// CLIENT_FOUND_ROWS flag: so lock the row, read, compare, write.
		g.create = `CREATE TABLE IF NOT EXISTS ` + G + ` (
			resource VARCHAR(512) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL PRIMARY KEY,
			token BIGINT NOT NULL) ENGINE=InnoDB`
		g.ensure = `INSERT INTO ` + G + ` (resource, token) VALUES (?, 0) ON DUPLICATE KEY UPDATE token = token`
		g.lock = `SELECT token FROM ` + G + ` WHERE resource = ? FOR UPDATE`
		g.record = `UPDATE ` + G + ` SET token = ? WHERE resource = ?`
	default:
		return nil, fmt.Errorf("%w: fencesql: unknown dialect %q", fence.ErrInvalidOption, dialect)
	}
	return g, nil
}

// Setup creates the guard table if it does not exist. It is idempotent.
func (g *Guard) Setup(ctx context.Context, q Querier) error {
	if _, err := q.ExecContext(ctx, g.create); err != nil {
		return fmt.Errorf("fencesql: setup: %w", err)
	}
	return nil
}

// Admit records token for resource in q's transaction and returns nil, or
// returns a *fence.StaleError (matching fence.ErrStale) and records
// nothing if token is lower than the highest admitted (not higher, for a
// strict guard). A token <= 0 is refused with fence.ErrInvalidToken. Do
// the guarded write after Admit, in the same transaction, and commit.
//
// In PostgreSQL it is one statement; in SQLite one statement, plus one to
// read the highest token when refusing; in MySQL three (ensure the row,
// lock and read it, record).
func (g *Guard) Admit(ctx context.Context, q Querier, resource string, token int64) error {
	if err := tokenrule.Check(resource, token); err != nil {
		return err
	}
	err := g.admitOnce(ctx, q, resource, token)
	fence.ObserveGuard(ctx, g.metrics, resource, token, err)
	return err
}

func (g *Guard) admitOnce(ctx context.Context, q Querier, resource string, token int64) error {
	if g.dialect == MySQL {
		return g.admitMySQL(ctx, q, resource, token)
	}
	var got int64
	err := q.QueryRowContext(ctx, g.admit, resource, token).Scan(&got)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		stale := &fence.StaleError{Resource: resource, Token: token, Strict: g.strict}
		_ = q.QueryRowContext(ctx, g.highest, resource).Scan(&stale.Highest)
		return stale
	case err != nil:
		return fmt.Errorf("fencesql: guard %q: %w", resource, err)
	}
	return nil
}

func (g *Guard) admitMySQL(ctx context.Context, q Querier, resource string, token int64) error {
	if _, err := q.ExecContext(ctx, g.ensure, resource); err != nil {
		return fmt.Errorf("fencesql: guard %q: %w", resource, err)
	}
	var highest int64
	if err := q.QueryRowContext(ctx, g.lock, resource).Scan(&highest); err != nil {
		return fmt.Errorf("fencesql: guard %q: %w", resource, err)
	}
	if !tokenrule.Admissible(token, highest, g.strict) {
		return &fence.StaleError{Resource: resource, Token: token, Highest: highest, Strict: g.strict}
	}
	if token == highest {
		return nil
	}
	if _, err := q.ExecContext(ctx, g.record, token, resource); err != nil {
		return fmt.Errorf("fencesql: guard %q: %w", resource, err)
	}
	return nil
}

// On returns a fence.Guard that admits each token in a transaction of its
// own on db: for checks that are not part of the caller's transaction,
// such as the fencehttp middleware.
func (g *Guard) On(db *sql.DB) fence.Guard { return dbGuard{g, db} }

type dbGuard struct {
	g  *Guard
	db *sql.DB
}

func (dg dbGuard) Admit(ctx context.Context, resource string, token int64) error {
	if err := tokenrule.Check(resource, token); err != nil {
		return err
	}
	tx, err := dg.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("fencesql: guard %q: %w", resource, err)
	}
	defer tx.Rollback()
	if err := dg.g.Admit(ctx, tx, resource, token); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("fencesql: guard %q: %w", resource, err)
	}
	return nil
}
