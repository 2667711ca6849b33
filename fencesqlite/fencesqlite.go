package fencesqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/metajson"
)

// DefaultBusyTimeout is how long an operation waits for another
// connection's write transaction to end, unless WithBusyTimeout says
// otherwise.
const DefaultBusyTimeout = 5 * time.Second

// Table is the name of the lock table.
const Table = "fence_locks"

// ErrNetworkFS is returned by Open for a database on a network or
// user-space file system, where SQLite's locks and shared memory do not
// keep processes apart.
var ErrNetworkFS = errors.New("fencesqlite: database on a network file system")

// Option configures Open.
type Option func(*options)

type options struct {
	busy  time.Duration
	now   func() time.Time
	anyFS bool
}

// WithBusyTimeout sets how long an operation waits for the write lock
// while another connection (of this or another process) writes, before
// it fails with SQLite's "database is locked". The context's deadline
// ends the wait too. It must be at least a millisecond.
func WithBusyTimeout(d time.Duration) Option { return func(o *options) { o.busy = d } }

// AllowNetworkFS turns off Open's refusal of network and user-space file
// systems, for a file system that statfs cannot tell from one (such as
// fuse-overlayfs under a rootless container) and that only processes of
// one host use. On a file system shared by several hosts the store is
// unsafe: SQLite's locks and WAL shared memory do not reach across hosts.
func AllowNetworkFS() Option { return func(o *options) { o.anyFS = true } }

// Store is a fence.Driver keeping leases in an SQLite database file. It
// is safe for concurrent use; any number of Stores, in any number of
// processes of the host, may share one file.
type Store struct {
	db   *sql.DB
	path string
	now  func() time.Time
}

var (
	_ fence.Driver      = (*Store)(nil)
	_ fence.Inspector   = (*Store)(nil)
	_ fence.Lister      = (*Store)(nil)
	_ fence.LockDelayer = (*Store)(nil)
)

// Open opens (creating it if needed) the SQLite database at path, in WAL
// mode, and creates the lock table if it does not exist (or adds to one
// made by an earlier version the column it lacks). The directory
// must exist. Open refuses a database on a network file system (see
// ErrNetworkFS). Close the Store when done.
func Open(path string, opts ...Option) (*Store, error) {
	o := options{busy: DefaultBusyTimeout, now: time.Now}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.busy < time.Millisecond {
		return nil, fmt.Errorf("%w: fencesqlite: busy timeout %v: at least 1ms", fence.ErrInvalidOption, o.busy)
	}
	if path == "" {
		return nil, fmt.Errorf("%w: fencesqlite: empty database path", fence.ErrInvalidOption)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("fencesqlite: %w", err)
	}
	dir := filepath.Dir(abs)
	if fi, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("fencesqlite: database directory: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("fencesqlite: %s is not a directory", dir)
	}
	if fs := networkFS(dir); fs != "" && !o.anyFS {
		return nil, fmt.Errorf("%w: %s is on %s; SQLite's locks do not work there, keep the database on a local disk",
			ErrNetworkFS, abs, fs)
	}
	// A file: URI, so that any character of the path is escaped, and
	// modernc's own parameters: the busy timeout first (before anything
	// that may need the write lock), WAL mode, every commit synced to
	// disk (FULL: also SQLite's default, said here so that a build with
	// another default does not weaken it), and every transaction begun
	// with BEGIN IMMEDIATE.
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", o.busy.Milliseconds()))
	q.Add("_pragma", "journal_mode(wal)")
	q.Add("_pragma", "synchronous(full)")
	q.Add("_txlock", "immediate")
	dsn := "file:" + (&url.URL{Path: abs}).EscapedPath() + "?" + q.Encode()
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("fencesqlite: open %s: %w", abs, err)
	}
	s := &Store{db: db, path: abs, now: o.now}
	if err := s.setup(context.Background(), o.busy); err != nil {
		db.Close()
		return nil, err
	}
	return s, nil
}

// Path returns the database file's absolute path.
func (s *Store) Path() string { return s.path }

// DB returns the database handle the Store uses, for reading the lock
// table or, in tests, for changing it behind the Store's back.
func (s *Store) DB() *sql.DB { return s.db }

// Close closes the database handle. It does not release leases (the
// Client does that).
func (s *Store) Close() error { return s.db.Close() }

// setup creates the lock table and checks that the database is in WAL
// mode. Processes opening a new file at the same moment race to switch it
// to WAL and to create the table, and SQLite answers the losers "database
// is locked" at once, without waiting (its busy handler is not called for
// a change of journal mode): so setup tries again, with backoff, until the
// busy timeout has passed.
func (s *Store) setup(ctx context.Context, busy time.Duration) error {
	deadline := time.Now().Add(busy)
	delay := time.Millisecond
	for {
		err := s.setupOnce(ctx)
		if err == nil || !isBusy(err) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(delay)
		delay = min(2*delay, 50*time.Millisecond)
	}
}

func (s *Store) setupOnce(ctx context.Context) error {
	// A key's row is kept after release (owner NULL) so that its token
	// never goes back. delay_us is the lease's lock-delay: the row blocks
	// the key until expires_us + delay_us.
	_, err := s.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+Table+` (
		key         TEXT PRIMARY KEY,
		token       INTEGER NOT NULL,
		owner       TEXT,
		expires_us  INTEGER,
		meta        TEXT,
		acquired_us INTEGER,
		delay_us    INTEGER NOT NULL DEFAULT 0
	)`)
	if err != nil {
		return fmt.Errorf("fencesqlite: setup %s: %w", s.path, err)
	}
	var mode string
	if err := s.db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		return fmt.Errorf("fencesqlite: setup %s: %w", s.path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("fencesqlite: %s: journal mode %q, not WAL: %w", s.path, mode, errNotWAL)
	}
	if err := s.migrate(ctx); err != nil {
		return fmt.Errorf("fencesqlite: setup %s: %w", s.path, err)
	}
	return nil
}

// migrate adds delay_us to a lock table made by a version without
// lock-delays. Its rows get 0, no delay. The check and the change are one
// write transaction, so that processes opening the file at once add the
// column once; a table that has it is only read.
func (s *Store) migrate(ctx context.Context) error {
	has := func(q queryer) (bool, error) {
		var n int
		err := q.QueryRowContext(ctx, `SELECT count(*) FROM pragma_table_info('`+Table+`') WHERE name = 'delay_us'`).Scan(&n)
		return n > 0, err
	}
	if ok, err := has(s.db); err != nil || ok {
		return err
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if ok, err := has(tx); err != nil || ok {
		return err
	}
	if _, err := tx.ExecContext(ctx, `ALTER TABLE `+Table+` ADD COLUMN delay_us INTEGER NOT NULL DEFAULT 0`); err != nil {
		return err
	}
	return tx.Commit()
}

// errNotWAL: the database is not in WAL mode yet, as when another process
// is switching a new file to WAL.
var errNotWAL = errors.New("the journal mode was not changed")

// isBusy reports whether err is SQLite's SQLITE_BUSY or SQLITE_LOCKED (any
// extended code), or errNotWAL.
func isBusy(err error) bool {
	var coded interface{ Code() int }
	if errors.As(err, &coded) {
		switch coded.Code() & 0xff {
		case 5, 6: // SQLITE_BUSY, SQLITE_LOCKED
			return true
		}
	}
	return errors.Is(err, errNotWAL)
}

// The statements. ?1 is the key, ?2 the owner, ?3 the time the
// transaction judges by (µs since 1970), ?4 the new expiry, ?5 the
// metadata, ?6 the lease's lock-delay (µs). The time is read after BEGIN
// IMMEDIATE returned, with the write lock held, so a wait for the lock
// never makes it stale.
//
// A lease is live until expires_us; its row blocks the key until
// expires_us + delay_us. In between, the lease has ended without a
// release and its lock-delay runs: acquisition is refused to everyone,
// the holder reads (qHolder, qList) still show it, with the time until
// the key is free, and its own extend and release are refused (the
// release's last condition), so that they can neither revive it nor
// lift the delay.
const (
	qAcquire = `INSERT INTO ` + Table + ` AS l (key, token, owner, expires_us, meta, acquired_us, delay_us)
		VALUES (?1, ?3, ?2, ?4, ?5, ?3, ?6)
		ON CONFLICT (key) DO UPDATE
			SET token = max(l.token + 1, ?3), owner = excluded.owner, expires_us = excluded.expires_us,
				meta = excluded.meta, acquired_us = excluded.acquired_us, delay_us = excluded.delay_us
			WHERE l.owner IS NULL OR l.expires_us + l.delay_us <= ?3
		RETURNING token`
	qHolder = `SELECT owner, token, meta, expires_us + delay_us - ?2, expires_us > ?2 FROM ` + Table + `
		WHERE key = ?1 AND owner IS NOT NULL AND expires_us + delay_us > ?2`
	qExtend = `UPDATE ` + Table + ` SET expires_us = ?4
		WHERE key = ?1 AND owner = ?2 AND expires_us > ?3`
	qRelease = `UPDATE ` + Table + ` SET owner = NULL, meta = NULL
		WHERE key = ?1 AND owner = ?2 AND (expires_us > ?3 OR expires_us + delay_us <= ?3)
		RETURNING expires_us > ?3`
	qList = `SELECT key, owner, token, meta, expires_us + delay_us - ?2 FROM ` + Table + `
		WHERE key >= ?1 AND owner IS NOT NULL AND expires_us + delay_us > ?2 ORDER BY key`
)

// SupportsLockDelay implements fence.LockDelayer: the Store keeps the
// lock-delay of locks, in the lease's row.
func (s *Store) SupportsLockDelay(k fence.Kind) bool { return k == fence.KindLock }

func micros(d time.Duration) int64 {
	return int64((d + time.Microsecond - 1) / time.Microsecond)
}

// write runs f in a write transaction (BEGIN IMMEDIATE) with the time
// read once the write lock is held, and commits if f returns nil.
func (s *Store) write(ctx context.Context, f func(tx *sql.Tx, now int64) error) error {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx, s.now().UnixMicro()); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

var errHeld = errors.New("held")

// TryAcquire implements fence.Driver in one transaction.
func (s *Store) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	if req.Kind != fence.KindLock {
		return nil, fmt.Errorf("fencesqlite: acquire %q: %w: %s", req.Key, fence.ErrUnsupported, req.Kind)
	}
	if req.LockDelay < 0 {
		return nil, fmt.Errorf("%w: fencesqlite: acquire %q: lock-delay %v is negative", fence.ErrInvalidOption, req.Key, req.LockDelay)
	}
	var meta any
	if len(req.Meta) > 0 {
		meta = metajson.Encode(req.Meta)
	}
	c := &claim{s: s, key: req.Key, owner: req.Owner}
	var h *fence.Holder
	err := s.write(ctx, func(tx *sql.Tx, now int64) error {
		err := tx.QueryRowContext(ctx, qAcquire, req.Key, req.Owner, now, now+micros(req.TTL), meta,
			micros(req.LockDelay)).Scan(&c.token)
		if !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if !req.SkipHolder {
			h, _, _ = holder(ctx, tx, req.Key, now) // informational: held all the same
		}
		return errHeld
	})
	switch {
	case errors.Is(err, errHeld):
		return nil, &fence.HeldError{Key: req.Key, Holder: h}
	case err != nil:
		return nil, fmt.Errorf("fencesqlite: acquire %q: %w", req.Key, err)
	}
	return c, nil
}

type claim struct {
	s     *Store
	key   string
	owner string
	token int64
}

func (c *claim) Token() int64 { return c.token }

func (c *claim) Extend(ctx context.Context, ttl time.Duration) error {
	var n int64
	err := c.s.write(ctx, func(tx *sql.Tx, now int64) error {
		res, err := tx.ExecContext(ctx, qExtend, c.key, c.owner, now, now+micros(ttl))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return fmt.Errorf("fencesqlite: extend %q: %w", c.key, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %q: lease of %s expired or taken over", fence.ErrNotHeld, c.key, c.owner)
	}
	return nil
}

func (c *claim) Release(ctx context.Context) error {
	var live sql.NullBool
	found := false
	err := c.s.write(ctx, func(tx *sql.Tx, now int64) error {
		err := tx.QueryRowContext(ctx, qRelease, c.key, c.owner, now).Scan(&live)
		if errors.Is(err, sql.ErrNoRows) {
			return nil
		}
		found = err == nil
		return err
	})
	switch {
	case err != nil:
		return fmt.Errorf("fencesqlite: release %q: %w", c.key, err)
	case !found:
		return fmt.Errorf("%w: %q no longer held by %s (taken over, or expired with its lock-delay running)",
			fence.ErrNotHeld, c.key, c.owner)
	case !live.Bool:
		return fmt.Errorf("%w: %q: lease of %s had expired", fence.ErrNotHeld, c.key, c.owner)
	}
	return nil
}

// Inspect implements fence.Inspector. A lease in its lock-delay is
// shown, its ExpiresIn the time until the key is free.
func (s *Store) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	h, _, err := holder(ctx, s.db, key, s.now().UnixMicro())
	if err != nil {
		return fence.Holder{}, fmt.Errorf("fencesqlite: inspect %q: %w", key, err)
	}
	if h == nil {
		return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
	}
	return *h, nil
}

// List implements fence.Lister.
func (s *Store) List(ctx context.Context, prefix string) ([]fence.Holder, error) {
	rows, err := s.db.QueryContext(ctx, qList, prefix, s.now().UnixMicro())
	if err != nil {
		return nil, fmt.Errorf("fencesqlite: list %q: %w", prefix, err)
	}
	defer rows.Close()
	hs := []fence.Holder{}
	// Keys compare as their UTF-8 bytes (SQLite's BINARY collation), as
	// Go's strings do: the keys with the prefix come first from key >=
	// prefix, in order.
	for rows.Next() {
		h, err := scanHolder(rows)
		if err != nil {
			return nil, fmt.Errorf("fencesqlite: list %q: %w", prefix, err)
		}
		if !strings.HasPrefix(h.Key, prefix) {
			break
		}
		hs = append(hs, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("fencesqlite: list %q: %w", prefix, err)
	}
	return hs, nil
}

// queryer is a *sql.DB or a *sql.Tx.
type queryer interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// holder reads what keeps key from being acquired at now: a live lease
// (live is true) or one in its lock-delay; nil if nothing does.
func holder(ctx context.Context, q queryer, key string, now int64) (h *fence.Holder, live bool, err error) {
	var (
		hh     = fence.Holder{Key: key}
		meta   sql.NullString
		leftUS int64
	)
	err = q.QueryRowContext(ctx, qHolder, key, now).Scan(&hh.Owner, &hh.Token, &meta, &leftUS, &live)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	fill(&hh, meta, leftUS)
	return &hh, live, nil
}

func scanHolder(rows *sql.Rows) (fence.Holder, error) {
	var (
		h      fence.Holder
		meta   sql.NullString
		leftUS int64
	)
	if err := rows.Scan(&h.Key, &h.Owner, &h.Token, &meta, &leftUS); err != nil {
		return h, err
	}
	fill(&h, meta, leftUS)
	return h, nil
}

// fill sets h's ExpiresIn from the µs left until the key is free, and
// its metadata.
func fill(h *fence.Holder, meta sql.NullString, leftUS int64) {
	h.ExpiresIn = time.Duration(max(leftUS, 1)) * time.Microsecond
	if meta.Valid {
		h.Meta = metajson.Decode(meta.String) // metadata is informational
	}
}
