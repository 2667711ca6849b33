// Package fencemysql is a fence driver for MySQL 8 and MariaDB (10.0.2 and
// later): a lease is a user-level lock (GET_LOCK) held on a connection
// dedicated to it, and its fencing token is bumped in a per-key counter
// table on the same connection right after the lock is granted.
//
// Waiting happens in the server: Acquire blocks in GET_LOCK (the driver is
// a fence.BlockingAcquirer). A wait that ends by its context is ended in the
// server with KILL QUERY, so no request is left queued behind the holder.
// The lease ends when it is released or its connection ends: the server
// frees the lock when the holder's connection drops (a crash, KILL), and
// the driver notices its own connection's end at once and reports it
// (fence.SessionClaim), so the Client cancels the lease's context.
//
// User-level locks live in the server's memory: they do not survive a
// restart or a failover to a replica (the tokens, in an InnoDB table, do).
// Lock names are server-wide, shared by all databases, and at most 64
// characters in MySQL; see LockName for how keys map to names.
//
// Create the counter table with Setup (idempotent), or pass WithAutoSetup.
// See docs/mysql.md.
package fencemysql

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/cancelwait"
	"github.com/fencing/fence/internal/kit/keyenc"
	"github.com/fencing/fence/internal/kit/lossnote"
)

// DefaultTable is the default name of the counter table.
const DefaultTable = "fence_tokens"

// DefaultPrefix is the default prefix of lock names.
const DefaultPrefix = "fence"

// ErrKeyCollision is returned when a key's lock name is recorded in the
// counter table for a different key. With hashed names this needs a
// SHA-256 collision; it is checked anyway, so that two keys never silently
// share a lock.
var ErrKeyCollision = errors.New("fencemysql: two keys map to the same lock name")

// Option configures a Store.
type Option func(*options)

type options struct {
	table     string
	prefix    string
	autoSetup bool
}

// WithTable sets the counter table's name: letters, digits and
// underscores, optionally qualified by a database ("locks.fence_tokens").
func WithTable(name string) Option { return func(o *options) { o.table = name } }

// WithPrefix sets the prefix of lock names (default "fence"): 1 to 8
// lowercase letters, digits or underscores. Lock names are server-wide, so
// give applications that must not share locks different prefixes.
func WithPrefix(prefix string) Option { return func(o *options) { o.prefix = prefix } }

// WithAutoSetup makes the driver create its table (as Setup does) on first
// use.
func WithAutoSetup() Option { return func(o *options) { o.autoSetup = true } }

var (
	identPart = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)
	prefixRE  = regexp.MustCompile(`^[a-z0-9_]{1,8}$`)
	b32       = base32.StdEncoding.WithPadding(base32.NoPadding)
)

func quoteTable(name string) (string, error) {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return "", fmt.Errorf("%w: fencemysql: table name %q: at most database.table", fence.ErrInvalidOption, name)
	}
	for i, p := range parts {
		if !identPart.MatchString(p) {
			return "", fmt.Errorf("%w: fencemysql: table name %q: letters, digits and underscores, not starting with a digit, at most 64 per part",
				fence.ErrInvalidOption, name)
		}
		parts[i] = "`" + p + "`"
	}
	return strings.Join(parts, "."), nil
}

// LockName returns the GET_LOCK name of key under prefix (DefaultPrefix
// if empty): prefix + ":" + key when the key is made only of lowercase
// ASCII letters, digits and "_./:-" and the name fits in 64 characters;
// otherwise prefix + "#" + the unpadded lowercase base32 of the key's
// SHA-256. So names fit MySQL's 64-character limit, and keys that differ
// only in case (MySQL and MariaDB compare lock names case-insensitively)
// or in Unicode normalization stay different locks.
func LockName(prefix, key string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if len(prefix)+1+len(key) <= 64 && key != "" && plainKeys.Keeps(key) {
		return prefix + ":" + key
	}
	sum := sha256.Sum256([]byte(key))
	return prefix + "#" + strings.ToLower(b32.EncodeToString(sum[:]))
}

// plainKeys are the keys that name their lock as they are: lower case,
// since lock names ignore case.
var plainKeys = keyenc.New('%', keyenc.Lower("_./:-"))

// Store is the MySQL/MariaDB fence driver. It is safe for concurrent use.
type Store struct {
	db     *sql.DB
	table  string // quoted
	prefix string
	auto   bool

	setupMu   sync.Mutex
	setupDone bool

	mu     sync.Mutex
	active map[*claim]struct{}
	closed bool

	qTry, qBump, qHolder, qList string
}

var (
	_ fence.Driver           = (*Store)(nil)
	_ fence.BlockingAcquirer = (*Store)(nil)
	_ fence.Inspector        = (*Store)(nil)
	_ fence.Lister           = (*Store)(nil)
	_ fence.SessionClaim     = (*claim)(nil)
)

// New returns a driver over db (opened with the go-sql-driver/mysql
// driver). Each lease takes two connections from db while it is held:
// one holds the lock, one waits to learn at once if the first ends, and
// both go back to db when it ends. database/sql keeps two idle
// connections unless told otherwise, so with more leases held at once it
// closes connections as leases end and opens new ones for the next: set
// db.SetMaxIdleConns (and SetMaxOpenConns) to twice the leases you hold
// at once. Close the driver when done; it does not close db.
func New(db *sql.DB, opts ...Option) (*Store, error) {
	if db == nil {
		return nil, fmt.Errorf("%w: fencemysql: nil db", fence.ErrInvalidOption)
	}
	o := options{table: DefaultTable, prefix: DefaultPrefix}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.table == "" {
		o.table = DefaultTable
	}
	if o.prefix == "" {
		o.prefix = DefaultPrefix
	}
	T, err := quoteTable(o.table)
	if err != nil {
		return nil, err
	}
	if !prefixRE.MatchString(o.prefix) {
		return nil, fmt.Errorf("%w: fencemysql: prefix %q: 1 to 8 lowercase letters, digits or underscores", fence.ErrInvalidOption, o.prefix)
	}
	d := &Store{db: db, table: T, prefix: o.prefix, auto: o.autoSetup, active: make(map[*claim]struct{})}
	// One round trip: this connection's id, the lock (only then the
	// liveness lock), the key recorded for the name (to detect a
	// collision) and, if held, the holder.
	d.qTry = `SELECT CONNECTION_ID(), GET_LOCK(?, 0), IF(IS_USED_LOCK(?) = CONNECTION_ID(), GET_LOCK(?, 0), 0),
			t.lock_key, IS_USED_LOCK(?), t.holder_id, t.owner, t.token, t.meta
		FROM (SELECT 1) AS one LEFT JOIN ` + T + ` AS t ON t.name = ?`
	// The token: LAST_INSERT_ID(expr) hands it back in the reply. It is
	// seeded from the server's clock in microseconds, so a counter that
	// went back (a failover to an asynchronous replica that lost the last
	// bumps, a restored backup) still yields a token above every earlier.
	const us = `CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)`
	d.qBump = `INSERT INTO ` + T + ` (name, lock_key, token, owner, holder_id, meta, acquired_at)
		VALUES (?, ?, LAST_INSERT_ID(` + us + `), ?, CONNECTION_ID(), ?, NOW(6))
		ON DUPLICATE KEY UPDATE token = LAST_INSERT_ID(GREATEST(token + 1, ` + us + `)), owner = VALUES(owner),
			holder_id = VALUES(holder_id), meta = VALUES(meta), acquired_at = VALUES(acquired_at)`
	d.qHolder = `SELECT IS_USED_LOCK(?), t.lock_key, t.holder_id, t.owner, t.token, t.meta
		FROM (SELECT 1) AS one LEFT JOIN ` + T + ` AS t ON t.name = ?`
	d.qList = `SELECT lock_key, owner, token, meta FROM ` + T + `
		WHERE holder_id IS NOT NULL AND LEFT(lock_key, CHAR_LENGTH(?)) = ? AND IS_USED_LOCK(name) = holder_id`
	return d, nil
}

// Setup creates the counter table if it does not exist. It is idempotent.
func (d *Store) Setup(ctx context.Context) error {
	_, err := d.db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+d.table+` (
		name        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
		lock_key    MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
		token       BIGINT NOT NULL,
		owner       VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
		holder_id   BIGINT UNSIGNED NULL,
		meta        TEXT CHARACTER SET utf8mb4 NULL,
		acquired_at DATETIME(6) NULL
	) ENGINE=InnoDB`)
	if err != nil {
		return fmt.Errorf("fencemysql: setup: %w", err)
	}
	return nil
}

func (d *Store) ensureSetup(ctx context.Context) error {
	if !d.auto {
		return nil
	}
	d.setupMu.Lock()
	defer d.setupMu.Unlock()
	if d.setupDone {
		return nil
	}
	if err := d.Setup(ctx); err != nil {
		return err
	}
	d.setupDone = true
	return nil
}

// Close ends the driver's leases that are still held by closing their
// connections (which frees their locks). The Client releases its leases
// before; Close does not close db.
func (d *Store) Close() error {
	d.mu.Lock()
	d.closed = true
	active := make([]*claim, 0, len(d.active))
	for c := range d.active {
		active = append(active, c)
	}
	d.mu.Unlock()
	for _, c := range active {
		c.stopMonitor()
		discard(c.conn)
		d.forget(c)
	}
	return nil
}

func (d *Store) forget(c *claim) {
	d.mu.Lock()
	delete(d.active, c)
	d.mu.Unlock()
}

// discard closes conn instead of returning it to the pool: it may hold a
// lock, or be in an unknown state. The server frees its locks when it sees
// the connection end.
func discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}

// attempt is one try of the lock on a dedicated connection.
type attempt struct {
	conn     *sql.Conn
	connID   int64
	got      bool
	liveName string
}

// try takes a connection and tries the lock once. It returns the
// connection either holding the lock and the liveness lock (got) or
// holding nothing, with the held error.
func (d *Store) try(ctx context.Context, req fence.Request, name string) (*attempt, error) {
	if err := d.ensureSetup(ctx); err != nil {
		return nil, err
	}
	d.mu.Lock()
	closed := d.closed
	d.mu.Unlock()
	if closed {
		return nil, errors.New("fencemysql: driver closed")
	}
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("fencemysql: acquire %q: %w", req.Key, err)
	}
	a := &attempt{conn: conn, liveName: liveName(d.prefix)}
	var (
		got, live                sql.NullInt64
		recorded, owner, metaRaw sql.NullString
		usedBy, holderID, token  sql.NullInt64
	)
	err = conn.QueryRowContext(ctx, d.qTry, name, name, a.liveName, name, name).
		Scan(&a.connID, &got, &live, &recorded, &usedBy, &holderID, &owner, &token, &metaRaw)
	if err != nil {
		discard(conn)
		return nil, fmt.Errorf("fencemysql: acquire %q: %w", req.Key, err)
	}
	if got.Int64 == 1 && live.Int64 != 1 {
		a.unlock(ctx, name)
		discard(conn)
		return nil, fmt.Errorf("fencemysql: acquire %q: could not take the liveness lock %q", req.Key, a.liveName)
	}
	if recorded.Valid && recorded.String != req.Key {
		if got.Int64 == 1 {
			a.unlock(ctx, name)
		}
		d.putBack(a)
		return nil, fmt.Errorf("%w: %q and %.64q both map to %q", ErrKeyCollision, req.Key, recorded.String, name)
	}
	if !got.Valid {
		discard(conn)
		return nil, fmt.Errorf("fencemysql: acquire %q: GET_LOCK(%q) failed", req.Key, name)
	}
	if got.Int64 == 1 {
		a.got = true
		return a, nil
	}
	held := &fence.HeldError{Key: req.Key}
	if usedBy.Valid && holderID.Valid && usedBy.Int64 == holderID.Int64 && recorded.String == req.Key {
		held.Holder = &fence.Holder{Key: req.Key, Owner: owner.String, Token: token.Int64, Meta: parseMeta(metaRaw)}
	}
	return a, held
}

// unlock releases the attempt's lock and liveness lock.
func (a *attempt) unlock(ctx context.Context, name string) {
	_, _ = a.conn.ExecContext(ctx, `DO RELEASE_LOCK(?), RELEASE_LOCK(?)`, name, a.liveName)
}

// putBack returns a connection that holds no lock to the pool.
func (d *Store) putBack(a *attempt) { _ = a.conn.Close() }

// liveName returns a unique name for a lease's liveness lock.
func liveName(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + "~" + hex.EncodeToString(b[:])
}

func parseMeta(raw sql.NullString) map[string]string {
	if !raw.Valid || raw.String == "" {
		return nil
	}
	var m map[string]string
	if json.Unmarshal([]byte(raw.String), &m) != nil {
		return nil
	}
	return m
}

// TryAcquire implements fence.Driver: two round trips on a dedicated
// connection when the lock is free (lock, then token), one when it is held.
// An error that says the server could not answer (a connection refused or
// lost, too many connections) matches fence.ErrUnavailable.
func (d *Store) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	c, err := d.tryAcquire(ctx, req)
	return c, markUnavailable(ctx, err)
}

func (d *Store) tryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	name := LockName(d.prefix, req.Key)
	a, err := d.try(ctx, req, name)
	if err != nil {
		if a != nil {
			d.putBack(a)
		}
		return nil, err
	}
	return d.grant(ctx, a, req, name)
}

// waitForever is GET_LOCK's timeout for a blocking wait, in seconds (a
// year): MariaDB takes a negative timeout as an error, not as "forever".
const waitForever = 365 * 24 * 3600

// Acquire implements fence.BlockingAcquirer: it waits in GET_LOCK. When
// ctx ends first, it ends the wait in the server with KILL QUERY and
// closes the connection, so no request is left queued. Its errors match
// fence.ErrUnavailable as TryAcquire's do, so the Client waits through the
// server's absence.
func (d *Store) Acquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	c, err := d.acquire(ctx, req)
	return c, markUnavailable(ctx, err)
}

func (d *Store) acquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	name := LockName(d.prefix, req.Key)
	a, err := d.try(ctx, req, name)
	var held *fence.HeldError
	switch {
	case err == nil:
		return d.grant(ctx, a, req, name)
	case !errors.As(err, &held):
		if a != nil {
			d.putBack(a)
		}
		return nil, err
	}
	got, err := d.wait(ctx, a.conn, a.connID, name)
	switch {
	case ctx.Err() != nil:
		if got {
			a.unlock(context.Background(), name)
		}
		discard(a.conn)
		return nil, ctx.Err()
	case err != nil:
		discard(a.conn)
		return nil, fmt.Errorf("fencemysql: acquire %q: %w", req.Key, err)
	case !got:
		discard(a.conn)
		return nil, fmt.Errorf("fencemysql: acquire %q: GET_LOCK(%q) returned without the lock", req.Key, name)
	}
	var ok sql.NullInt64
	if err := a.conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 0)`, a.liveName).Scan(&ok); err != nil || ok.Int64 != 1 {
		a.unlock(context.Background(), name)
		discard(a.conn)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			return nil, fmt.Errorf("fencemysql: acquire %q: liveness lock: %w", req.Key, err)
		}
		return nil, fmt.Errorf("fencemysql: acquire %q: could not take the liveness lock %q", req.Key, a.liveName)
	}
	a.got = true
	return d.grant(ctx, a, req, name)
}

// wait blocks in GET_LOCK on conn until it is granted or ctx ends. Then
// it kills the statement from another connection (cancelwait), and after
// a grace period the whole connection.
func (d *Store) wait(ctx context.Context, conn *sql.Conn, connID int64, name string) (bool, error) {
	var got sql.NullInt64
	err := cancelwait.Run(ctx, func(kctx context.Context, hard bool) {
		kill := "KILL QUERY %d"
		if hard {
			kill = "KILL CONNECTION %d"
		}
		_, _ = d.db.ExecContext(kctx, fmt.Sprintf(kill, connID))
	}, func() error {
		return conn.QueryRowContext(context.Background(), `SELECT /* fence wait */ GET_LOCK(?, ?)`, name, waitForever).Scan(&got)
	})
	return got.Int64 == 1, err
}

// grant bumps the token of a granted attempt and starts its monitor.
func (d *Store) grant(ctx context.Context, a *attempt, req fence.Request, name string) (fence.Claim, error) {
	var meta any
	if req.Meta != nil {
		b, _ := json.Marshal(req.Meta)
		meta = string(b)
	}
	res, err := a.conn.ExecContext(ctx, d.qBump, name, req.Key, req.Owner, meta)
	var token int64
	if err == nil {
		token, err = res.LastInsertId()
	}
	if err != nil || token <= 0 {
		a.unlock(context.Background(), name)
		discard(a.conn)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			return nil, fmt.Errorf("fencemysql: acquire %q: token: %w", req.Key, err)
		}
		return nil, fmt.Errorf("fencemysql: acquire %q: token %d", req.Key, token)
	}
	c := &claim{d: d, conn: a.conn, connID: a.connID, key: req.Key, name: name, live: a.liveName, owner: req.Owner, token: token,
		Note: lossnote.New()}
	d.mu.Lock()
	d.active[c] = struct{}{}
	d.mu.Unlock()
	if err := c.startMonitor(ctx); err != nil {
		c.release(context.Background())
		return nil, fmt.Errorf("fencemysql: acquire %q: monitor: %w", req.Key, err)
	}
	return c, nil
}

// claim is one lease: conn holds the lock and the liveness lock.
type claim struct {
	d              *Store
	conn           *sql.Conn
	connID         int64
	key            string
	name           string
	live           string
	owner          string
	token          int64
	*lossnote.Note // NotifyLost

	mu       sync.Mutex
	released bool
	monStop  context.CancelFunc
	monDone  chan struct{}
	pending  chan checkResult // a renewal check still running, if any
}

func (c *claim) Token() int64 { return c.token }

// startMonitor waits, on a second connection, for the liveness lock that
// the lease's connection holds. The server grants it the moment that
// connection ends (KILL, a crash, a broken network) or releases it, so the
// end of the session is known at once without polling.
func (c *claim) startMonitor(ctx context.Context) error {
	mon, err := c.d.db.Conn(ctx)
	if err != nil {
		return err
	}
	mctx, stop := context.WithCancel(context.Background())
	c.monStop, c.monDone = stop, make(chan struct{})
	go func() {
		defer close(c.monDone)
		var got sql.NullInt64
		err := mon.QueryRowContext(mctx, `SELECT /* fence monitor */ GET_LOCK(?, ?)`, c.live, waitForever).Scan(&got)
		c.mu.Lock()
		released := c.released
		c.mu.Unlock()
		if err != nil || mctx.Err() != nil {
			discard(mon)
			if !released && mctx.Err() == nil {
				// The monitor's own connection failed: the lease's may be
				// fine. The next renewal checks it.
				return
			}
			return
		}
		if got.Int64 == 1 {
			_, _ = mon.ExecContext(context.Background(), `DO RELEASE_LOCK(?)`, c.live)
		}
		_ = mon.Close()
		if !released {
			c.Report(fmt.Errorf("fencemysql: the connection holding %q ended", c.key))
			// The lease's connection is dead: free its slot in the pool.
			discard(c.conn)
			c.d.forget(c)
		}
	}()
	return nil
}

func (c *claim) stopMonitor() {
	if c.monStop != nil {
		c.monStop()
		<-c.monDone
	}
}

func (c *claim) sessionGone(err error) error {
	return fmt.Errorf("%w: %q: the connection holding it ended: %v", fence.ErrNotHeld, c.key, err)
}

// Extend checks that the lease's connection is alive and still holds the
// lock: a user-level lock has no expiry to push.
//
// The check runs without a deadline: the driver closes a connection whose
// statement is cut short, which would drop the lock, while a slow check
// only means that this renewal fails (and, if none succeeds in time, that
// the lease ends locally; the lock stays held until Release). A check
// still running when ctx ends is waited for by the next Extend or the
// Release.
func (c *claim) Extend(ctx context.Context, _ time.Duration) error {
	if c.pending == nil {
		c.pending = make(chan checkResult, 1)
		go func(done chan<- checkResult) {
			var r checkResult
			r.err = c.conn.QueryRowContext(context.Background(), `SELECT IS_USED_LOCK(?) = CONNECTION_ID()`, c.name).Scan(&r.mine)
			done <- r
		}(c.pending)
	}
	var r checkResult
	select {
	case r = <-c.pending:
		c.pending = nil
	case <-ctx.Done():
		return fmt.Errorf("fencemysql: extend %q: the check is still running: %w", c.key, ctx.Err())
	}
	var myErr *mysql.MySQLError
	switch {
	case r.err != nil && !errors.As(r.err, &myErr):
		return c.sessionGone(r.err)
	case r.err != nil:
		return fmt.Errorf("fencemysql: extend %q: %w", c.key, r.err)
	case r.mine.Int64 != 1:
		return fmt.Errorf("%w: %q: its connection no longer holds the lock", fence.ErrNotHeld, c.key)
	}
	return nil
}

type checkResult struct {
	mine sql.NullInt64
	err  error
}

// Release unlocks and returns the connection to the pool; if anything goes
// wrong it closes the connection, which frees the lock too.
func (c *claim) Release(ctx context.Context) error {
	ctx, cancel := detach(ctx)
	defer cancel()
	return c.release(ctx)
}

func (c *claim) release(ctx context.Context) error {
	c.mu.Lock()
	c.released = true
	c.mu.Unlock()
	defer c.d.forget(c)
	if c.pending != nil {
		select {
		case <-c.pending:
			c.pending = nil
		case <-ctx.Done():
			// The connection is stuck in a check: close it once the check
			// ends (database/sql waits for it), which frees the lock.
			c.stopMonitor()
			go func(pending <-chan checkResult) {
				<-pending
				discard(c.conn)
			}(c.pending)
			return fmt.Errorf("fencemysql: release %q: %w (connection closed, which frees the lock)", c.key, ctx.Err())
		}
	}
	var main, live sql.NullInt64
	err := c.conn.QueryRowContext(ctx, `SELECT RELEASE_LOCK(?), RELEASE_LOCK(?)`, c.name, c.live).Scan(&main, &live)
	if err == nil && c.monDone != nil {
		// The monitor is granted the liveness lock now, and ends.
		select {
		case <-c.monDone:
		case <-ctx.Done():
		}
	}
	c.stopMonitor()
	var myErr *mysql.MySQLError
	switch {
	case err != nil && !errors.As(err, &myErr):
		discard(c.conn)
		return c.sessionGone(err)
	case err != nil:
		discard(c.conn)
		return fmt.Errorf("fencemysql: release %q: %w (connection closed, which frees the lock)", c.key, err)
	case main.Int64 != 1:
		discard(c.conn)
		return fmt.Errorf("%w: %q: its connection no longer held the lock", fence.ErrNotHeld, c.key)
	}
	_ = c.conn.Close()
	return nil
}

// detach returns a context with ctx's values and deadline but not its
// cancellation.
func detach(ctx context.Context) (context.Context, context.CancelFunc) {
	d, ok := ctx.Deadline()
	ctx = context.WithoutCancel(ctx)
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, d)
}

// Inspect implements fence.Inspector with IS_USED_LOCK and the counter
// table.
func (d *Store) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	if err := d.ensureSetup(ctx); err != nil {
		return fence.Holder{}, err
	}
	name := LockName(d.prefix, key)
	var (
		usedBy, holderID, token  sql.NullInt64
		recorded, owner, metaRaw sql.NullString
	)
	err := d.db.QueryRowContext(ctx, d.qHolder, name, name).Scan(&usedBy, &recorded, &holderID, &owner, &token, &metaRaw)
	if err != nil {
		return fence.Holder{}, fmt.Errorf("fencemysql: inspect %q: %w", key, err)
	}
	if !usedBy.Valid {
		return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
	}
	h := fence.Holder{Key: key}
	if holderID.Valid && holderID.Int64 == usedBy.Int64 && recorded.String == key {
		h.Owner, h.Token, h.Meta = owner.String, token.Int64, parseMeta(metaRaw)
	}
	return h, nil
}

// List implements fence.Lister.
func (d *Store) List(ctx context.Context, prefix string) ([]fence.Holder, error) {
	if err := d.ensureSetup(ctx); err != nil {
		return nil, err
	}
	rows, err := d.db.QueryContext(ctx, d.qList, prefix, prefix)
	if err != nil {
		return nil, fmt.Errorf("fencemysql: list %q: %w", prefix, err)
	}
	defer rows.Close()
	var hs []fence.Holder
	for rows.Next() {
		var (
			h       fence.Holder
			owner   sql.NullString
			metaRaw sql.NullString
		)
		if err := rows.Scan(&h.Key, &owner, &h.Token, &metaRaw); err != nil {
			return nil, fmt.Errorf("fencemysql: list %q: %w", prefix, err)
		}
		if !strings.HasPrefix(h.Key, prefix) {
			continue
		}
		h.Owner, h.Meta = owner.String, parseMeta(metaRaw)
		hs = append(hs, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("fencemysql: list %q: %w", prefix, err)
	}
	slices.SortFunc(hs, func(a, b fence.Holder) int { return strings.Compare(a.Key, b.Key) })
	return hs, nil
}
