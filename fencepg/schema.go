package fencepg

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencing/fence"
)

// clockToken is the database server's clock in microseconds since the
// epoch: the first token of a key, and the floor of every later one
// (nextToken). Counters are ordinary rows, so an asynchronous replica that
// is promoted without the last commits, or a restored backup, has an older
// counter than tokens already handed out; seeding from the clock keeps the
// next token above them all the same, assuming the new primary's clock is
// not behind the old one's by more than the time since the lost commits.
const clockToken = `(extract(epoch FROM clock_timestamp()) * 1000000)::bigint`

// nextToken is the SQL for the token after prev: prev + 1, or the server's
// clock in microseconds if that is greater (docs/design.md rule 2).
func nextToken(prev string) string {
	return `greatest(` + prev + ` + 1, ` + clockToken + `)`
}

// Tables names the tables fencepg uses. A zero field takes its default.
// A name is an SQL identifier, optionally qualified by a schema
// ("locking.fence_locks"): letters, digits and underscores, not starting
// with a digit, at most 63 bytes per part. Names are validated and quoted,
// never interpolated unchecked, so they are case-sensitive as given.
type Tables struct {
	// Locks is lease mode's table: one row per key, holding its owner,
	// expiry and token. Default "fence_locks". Its name is also the
	// LISTEN/NOTIFY channel on which releases are announced.
	Locks string
	// Tokens is the counter table of session and transaction modes: one
	// row per key with its last token, its advisory lock id and, while
	// held, its holder. Default "fence_tokens".
	Tokens string
	// Guard is the guards' table: the highest token admitted per resource.
	// Default "fence_guard".
	Guard string
	// Kinds holds what semaphores and reader-writer locks need: per key
	// and kind, a token counter row (slot -1), and in lease mode one row
	// per semaphore slot. Default "fence_kinds".
	Kinds string
}

// Default table names.
const (
	DefaultLocksTable  = "fence_locks"
	DefaultTokensTable = "fence_tokens"
	DefaultGuardTable  = "fence_guard"
	DefaultKindsTable  = "fence_kinds"
)

// ErrKeyCollision is returned when two different keys map to the same
// advisory lock id (see AdvisoryID). fencepg keeps every key beside its id
// in the tokens table, so such a collision is detected and refused instead
// of silently making two keys one lock.
var ErrKeyCollision = errors.New("fencepg: two keys map to the same advisory lock id")

var identPart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// table is a validated table name, with its quoted SQL form.
type table struct {
	name   string // as given, e.g. locking.fence_locks
	quoted string // "locking"."fence_locks"
}

func parseTable(name, def string) (table, error) {
	if name == "" {
		name = def
	}
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return table{}, fmt.Errorf("%w: fencepg: table name %q: at most schema.table", fence.ErrInvalidOption, name)
	}
	for _, p := range parts {
		if !identPart.MatchString(p) {
			return table{}, fmt.Errorf("%w: fencepg: table name %q: each part must be letters, digits and underscores, not starting with a digit, at most 63 bytes",
				fence.ErrInvalidOption, name)
		}
	}
	return table{name: name, quoted: pgx.Identifier(parts).Sanitize()}, nil
}

type tables struct {
	locks, tokens, guard, kinds table
}

func (t Tables) parse() (tables, error) {
	var ts tables
	var err error
	if ts.locks, err = parseTable(t.Locks, DefaultLocksTable); err != nil {
		return ts, err
	}
	if ts.tokens, err = parseTable(t.Tokens, DefaultTokensTable); err != nil {
		return ts, err
	}
	if ts.guard, err = parseTable(t.Guard, DefaultGuardTable); err != nil {
		return ts, err
	}
	if ts.kinds, err = parseTable(t.Kinds, DefaultKindsTable); err != nil {
		return ts, err
	}
	return ts, nil
}

// Option configures a driver, a Guard, a TxLocker or Setup. WithTables
// is for all of them; the others only for the constructors that read
// them, and the rest refuse them with an error matching
// fence.ErrInvalidOption, never ignore them.
type Option func(*options)

type options struct {
	tables       Tables
	autoSetup    bool
	strict       bool
	guardMetrics fence.GuardObserver
	given        []string // the options given, but WithTables
}

// WithTables sets the table names; zero fields keep their defaults.
func WithTables(t Tables) Option { return func(o *options) { o.tables = t } }

// WithAutoSetup makes a driver (NewLeaseStore, NewSessionStore) create
// its tables (idempotently, as Setup does) before its first operation, so
// that a separate migration step is not needed. It needs the rights to
// create tables.
func WithAutoSetup() Option {
	return func(o *options) { o.autoSetup = true; o.given = append(o.given, "WithAutoSetup") }
}

// Strict makes a Guard (NewGuard) admit only tokens above the highest
// admitted (token > highest) instead of the default token >= highest.
func Strict() Option {
	return func(o *options) { o.strict = true; o.given = append(o.given, "Strict") }
}

// WithGuardMetrics makes a Guard (NewGuard) tell m its admissions and
// stale refusals (fenceotel.NewGuardMetrics counts them, and adds an event
// to the caller's span on each refusal). An admission is reported when
// Admit admits, whether or not the caller's transaction then commits.
func WithGuardMetrics(m fence.GuardObserver) Option {
	return func(o *options) { o.guardMetrics = m; o.given = append(o.given, "WithGuardMetrics") }
}

// collect applies opts, given to call, which reads WithTables and the
// options named in reads, and refuses any other.
func collect(opts []Option, call string, reads ...string) (options, tables, error) {
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	for _, name := range o.given {
		if !slices.Contains(reads, name) {
			return o, tables{}, fmt.Errorf("%w: fencepg: %s given to %s, which does not use it", fence.ErrInvalidOption, name, call)
		}
	}
	ts, err := o.tables.parse()
	return o, ts, err
}

// Setup creates fencepg's tables if they do not exist (and adds to a lock
// table made by an earlier version the lock_delay column it lacks): the lease mode lock
// table, the counter table of session and transaction modes, the guard
// table and the table of semaphores and reader-writer locks. It is idempotent and safe to run concurrently from several
// processes (it holds an advisory transaction lock while it runs); run it
// from a migration step or at start-up. The options name the tables.
func Setup(ctx context.Context, pool *pgxpool.Pool, opts ...Option) error {
	_, ts, err := collect(opts, "Setup")
	if err != nil {
		return err
	}
	return ts.setup(ctx, pool)
}

// setupLock serializes concurrent Setups: CREATE TABLE IF NOT EXISTS can
// fail with a unique violation on the catalog when two sessions race.
var setupLock = AdvisoryID("fencepg setup")

func (ts tables) setup(ctx context.Context, pool *pgxpool.Pool) error {
	// The counter tables have no CHECK constraint on token: PostgreSQL
	// builds a table's CHECK expressions anew (from their stored text) in
	// every statement that writes to it, which cost a token bump a good
	// share of its server time (docs/performance.md), and tokens are
	// above 0 by construction
	// (nextToken: at least the server's clock in microseconds). Tables
	// created by earlier versions keep theirs (docs/postgres.md says how
	// to drop it): it costs time, never correctness.
	stmts := []string{
		`SELECT pg_advisory_xact_lock(` + fmt.Sprint(setupLock) + `)`,
		// lock_delay is the lease's lock-delay: the row blocks the key
		// until expires_at + lock_delay.
		`CREATE TABLE IF NOT EXISTS ` + ts.locks.quoted + ` (
			key        text PRIMARY KEY,
			token      bigint NOT NULL,
			owner      text,
			expires_at timestamptz,
			meta       jsonb,
			acquired_at timestamptz,
			lock_delay interval NOT NULL DEFAULT interval '0'
		)`,
		`CREATE TABLE IF NOT EXISTS ` + ts.tokens.quoted + ` (
			key        text PRIMARY KEY,
			lock_id    bigint NOT NULL UNIQUE,
			token      bigint NOT NULL,
			owner      text,
			holder_pid integer,
			meta       jsonb,
			acquired_at timestamptz
		)`,
		`CREATE TABLE IF NOT EXISTS ` + ts.guard.quoted + ` (
			resource text PRIMARY KEY,
			token    bigint NOT NULL CHECK (token > 0)
		)`,
		// Slot -1 of a (kind, key) is its token counter (with, for session
		// mode's reader-writer locks, the advisory id, unique so that a
		// collision is refused); slots 0 and up are lease mode's semaphore
		// slots.
		`CREATE TABLE IF NOT EXISTS ` + ts.kinds.quoted + ` (
			kind       text NOT NULL,
			key        text NOT NULL,
			slot       integer NOT NULL,
			lock_id    bigint UNIQUE,
			token      bigint NOT NULL,
			owner      text,
			expires_at timestamptz,
			lim        integer,
			meta       jsonb,
			acquired_at timestamptz,
			PRIMARY KEY (kind, key, slot)
		)`,
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, s := range stmts {
			if _, err := tx.Exec(ctx, s); err != nil {
				return err
			}
		}
		return ts.migrate(ctx, tx)
	})
	if err != nil {
		return fmt.Errorf("fencepg: setup: %w", err)
	}
	return nil
}

// migrate adds lock_delay to a lock table made by a version without
// lock-delays; its rows get no delay. It looks first, so that a table
// that has the column is only read: ALTER TABLE would take an ACCESS
// EXCLUSIVE lock on the table even when it changes nothing, and queue
// every lease operation behind any long transaction that reads it.
// Concurrent setups are serialized by setupLock.
func (ts tables) migrate(ctx context.Context, tx pgx.Tx) error {
	var has bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
		WHERE attrelid = $1::regclass AND attname = 'lock_delay' AND NOT attisdropped)`, ts.locks.quoted).Scan(&has)
	if err != nil || has {
		return err
	}
	_, err = tx.Exec(ctx, `ALTER TABLE `+ts.locks.quoted+` ADD COLUMN lock_delay interval NOT NULL DEFAULT interval '0'`)
	return err
}

// AdvisoryID returns the 64-bit advisory lock id that session and
// transaction modes lock for key: the first 8 bytes of the SHA-256 of the
// key's UTF-8 bytes, read as a big-endian signed integer. It is stable
// across versions of fencepg and processes, so other code may lock the
// same id (with pg_advisory_lock(bigint)) to exclude fence holders.
//
// Two keys could in principle share an id; fencepg records each key beside
// its id and refuses a colliding key with ErrKeyCollision.
func AdvisoryID(key string) int64 {
	sum := sha256.Sum256([]byte(key))
	return int64(binary.BigEndian.Uint64(sum[:8]))
}

// lockParts splits an advisory id the way pg_locks shows a bigint advisory
// lock: classid holds the high 32 bits, objid the low 32, objsubid is 1.
func lockParts(id int64) (classid, objid int64) {
	u := uint64(id)
	return int64(u >> 32), int64(u & 0xffffffff)
}
