package fencepg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/cancelwait"
	"github.com/fencing/fence/internal/kit/delayq"
	"github.com/fencing/fence/internal/kit/lossnote"
)

// SessionStore is session mode: a fence.Driver whose lease is a session
// advisory lock (pg_advisory_lock on AdvisoryID(key)) held on a connection
// dedicated to that lease, never one of the pool's shared connections. The
// token is bumped in the tokens table on the same connection right after
// the lock is granted. Waiting happens in the server (the driver is a
// fence.BlockingAcquirer). The lease ends when the lock is released or the
// connection ends: the server frees the lock at once when its holder's
// connection drops, and the driver notices the drop of its own connection
// (fence.SessionClaim) and the Client cancels the lease's context.
//
// Choose session mode when a crashed holder must free the key at once
// rather than after a TTL, and the database is a single primary: advisory
// locks live in the server's memory and do not survive a restart or a
// failover (the tokens do). Session mode needs a direct connection or a
// session-pooling proxy; a transaction-pooling proxy (PgBouncer in
// transaction mode) breaks it.
//
// Keys locked in session mode and in transaction mode (LockTx) exclude
// each other and share one token counter; lease mode is separate, so do
// not lock one key in lease mode and in another mode.
type SessionStore struct {
	pool *pgxpool.Pool
	ts   tables
	auto bool

	setupMu   sync.Mutex
	setupDone bool

	mu     sync.Mutex
	idle   []*pgx.Conn // dedicated connections that hold no lock, for reuse, oldest first
	active map[*sessionClaim]struct{}
	closed bool
	// acquiring counts the acquisitions holding a connection from take
	// that are not yet leases. peak and prevPeak are the most connections
	// in use at once (active plus acquiring) in the current idle window,
	// which began at windowStart, and in the one before.
	acquiring      int
	peak, prevPeak int
	windowStart    time.Time
	idleWindow     time.Duration

	watches *delayq.Queue // starts the watch on each lease's connection

	qTry, qWait, qBump, qHolder, qList, qMine string

	qTryRead, qTryWrite, qWaitRead, qWaitWrite, qBumpRW string
}

// A SessionStore keeps unused dedicated connections for later leases:
// as many as make, with those in use, the most it had in use at once in
// the last idleWindow or the one before, and at least minIdle. So a
// steady load opens no connection, and those a burst opened are closed
// as leases end once the burst is more than two windows old.
const (
	minIdle    = 4
	idleWindow = time.Minute
)

var (
	_ fence.Driver           = (*SessionStore)(nil)
	_ fence.BlockingAcquirer = (*SessionStore)(nil)
	_ fence.Inspector        = (*SessionStore)(nil)
	_ fence.Lister           = (*SessionStore)(nil)
	_ fence.SessionClaim     = (*sessionClaim)(nil)
)

// NewSessionStore returns a session mode driver. It opens its dedicated
// connections with pool's connection settings, outside the pool. The
// tables must exist (see Setup), unless WithAutoSetup is given. Close the
// driver when done.
func NewSessionStore(pool *pgxpool.Pool, opts ...Option) (*SessionStore, error) {
	if pool == nil {
		return nil, fmt.Errorf("%w: fencepg: nil pool", fence.ErrInvalidOption)
	}
	o, ts, err := collect(opts, "NewSessionStore", "WithAutoSetup")
	if err != nil {
		return nil, err
	}
	T := ts.tokens.quoted
	d := &SessionStore{pool: pool, ts: ts, auto: o.autoSetup, active: make(map[*sessionClaim]struct{}),
		watches: delayq.New(watchDelay), windowStart: time.Now(), idleWindow: idleWindow}
	bumpFrom := func(src, where string) string {
		return `INSERT INTO ` + T + ` AS t (key, lock_id, token, owner, holder_pid, meta, acquired_at)
			SELECT $1, $2, ` + clockToken + `, $3, pg_backend_pid(), $4, clock_timestamp()` + src + where + `
			ON CONFLICT (key) DO UPDATE
				SET token = ` + nextToken("t.token") + `, owner = EXCLUDED.owner, holder_pid = EXCLUDED.holder_pid,
					meta = EXCLUDED.meta, acquired_at = EXCLUDED.acquired_at
			RETURNING t.token`
	}
	// Try the lock and, if granted, bump the token, in one round trip: no
	// row means the lock was not granted. The WHERE of a SELECT without
	// FROM is evaluated once, so the lock is taken at most once. (A CTE
	// that returned whether the lock was granted cost every acquisition
	// its setup in the server: docs/performance.md.) A key whose id
	// another key already uses violates the unique lock_id.
	d.qTry = bumpFrom("", " WHERE pg_try_advisory_lock($2)")
	// Wait for the lock in the server and bump the token once it is
	// granted, in one statement, so that a waiter holds the key one round
	// trip sooner. The statement's snapshot predates the wait, but ON
	// CONFLICT DO UPDATE updates the counter row's latest version in READ
	// COMMITTED, whatever the snapshot saw; under a stricter default
	// isolation the update fails instead (40001), and Acquire then bumps
	// in a statement of its own (qBump), holding the lock.
	d.qWait = `WITH lk AS (SELECT pg_advisory_lock($2)) ` + bumpFrom(" FROM lk", "")
	d.qBump = bumpFrom("", "")
	holders := `SELECT t.key, coalesce(t.owner, ''), t.token, t.meta FROM ` + T + ` t
		JOIN pg_locks l ON l.locktype = 'advisory' AND l.granted AND l.pid = t.holder_pid
			AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND l.classid::bigint = ((t.lock_id >> 32) & 4294967295)
			AND l.objid::bigint = (t.lock_id & 4294967295) AND l.objsubid = 1`
	d.qHolder = holders + ` WHERE t.lock_id = $1`
	d.qList = holders + ` WHERE starts_with(t.key, $1)`
	d.qMine = `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND pid = pg_backend_pid() AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 1)`
	d.rwQueries()
	return d, nil
}

// Setup creates the tables (see the package function Setup).
func (d *SessionStore) Setup(ctx context.Context) error { return d.ts.setup(ctx, d.pool) }

// Close closes the driver's idle dedicated connections, and the
// connections of leases still held (which frees their locks). The Client
// releases its leases before; Close does not close the pool.
func (d *SessionStore) Close() error {
	d.watches.Close()
	d.mu.Lock()
	d.closed = true
	idle := d.idle
	d.idle = nil
	active := make([]*sessionClaim, 0, len(d.active))
	for c := range d.active {
		active = append(active, c)
	}
	d.mu.Unlock()
	for _, c := range idle {
		_ = c.Close(context.Background())
	}
	for _, c := range active {
		c.stopWatch()
		if c.pending != nil {
			_ = c.conn.PgConn().Conn().SetDeadline(time.Now())
			<-c.pending
		}
		c.discard()
	}
	return nil
}

func (d *SessionStore) ensureSetup(ctx context.Context) error {
	if !d.auto {
		return nil
	}
	d.setupMu.Lock()
	defer d.setupMu.Unlock()
	if d.setupDone {
		return nil
	}
	if err := d.ts.setup(ctx, d.pool); err != nil {
		return err
	}
	d.setupDone = true
	return nil
}

// take returns a dedicated connection holding no lock, for an
// acquisition, which ends in newClaim or, when it fails, in a call to
// acquired.
func (d *SessionStore) take(ctx context.Context) (*pgx.Conn, error) {
	if err := d.ensureSetup(ctx); err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil, errDriverClosed
	}
	d.acquiring++
	d.idleLimit(time.Now())
	d.peak = max(d.peak, len(d.active)+d.acquiring)
	for len(d.idle) > 0 {
		c := d.idle[len(d.idle)-1]
		d.idle = d.idle[:len(d.idle)-1]
		if !c.IsClosed() {
			d.mu.Unlock()
			return c, nil
		}
	}
	d.mu.Unlock()
	conn, err := dial(ctx, d.pool)
	if err != nil {
		d.acquired()
		return nil, err
	}
	// PostgreSQL 14+ can notice during a wait that the client has gone
	// (a waiter that crashed), instead of granting the lock to a dead
	// connection when it is released. Older servers lack the setting.
	_, _ = conn.Exec(ctx, "SET client_connection_check_interval = 1000")
	return conn, nil
}

// acquired ends an acquisition that took a connection.
func (d *SessionStore) acquired() {
	d.mu.Lock()
	d.acquiring--
	d.mu.Unlock()
}

// idleLimit starts a new idle window if the current one is over, and
// returns how many connections, in use and idle, the driver keeps. d.mu
// is held.
func (d *SessionStore) idleLimit(now time.Time) int {
	if since := now.Sub(d.windowStart); since >= d.idleWindow {
		inUse := len(d.active) + d.acquiring
		d.prevPeak = d.peak
		if since >= 2*d.idleWindow {
			d.prevPeak = inUse
		}
		d.peak = inUse
		d.windowStart = now
	}
	return max(minIdle, d.peak, d.prevPeak)
}

// put keeps a connection that holds no lock for a later lease, unless
// the driver has as many as it keeps (see minIdle); then it closes it,
// and any idle ones beyond that, the longest unused first.
func (d *SessionStore) put(c *pgx.Conn) {
	var extra []*pgx.Conn
	d.mu.Lock()
	if !d.closed && !c.IsClosed() {
		d.idle = append(d.idle, c)
		c = nil
		if n := len(d.idle) + len(d.active) + d.acquiring - d.idleLimit(time.Now()); n > 0 {
			n = min(n, len(d.idle))
			extra = slices.Clone(d.idle[:n])
			d.idle = slices.Delete(d.idle, 0, n)
		}
	}
	d.mu.Unlock()
	if c != nil {
		_ = c.Close(context.Background())
	}
	for _, c := range extra {
		_ = c.Close(context.Background())
	}
}

// unlockTimeout bounds drop's unlocking of a failed connection.
const unlockTimeout = 5 * time.Second

// drop gets rid of a connection whose statement failed and that may hold
// a lock: after an error reported by the server the connection is sound,
// and unlocking everything on it frees the lock at once; otherwise it is
// closed, and the server frees the lock when it sees the connection end.
func (d *SessionStore) drop(conn *pgx.Conn, err error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && !conn.IsClosed() {
		ctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
		defer cancel()
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock_all()"); err == nil {
			d.put(conn)
			return
		}
	}
	_ = conn.Close(context.Background())
}

// TryAcquire implements fence.Driver: one round trip on a dedicated
// connection, plus one to read the holder when the key is held.
func (d *SessionStore) TryAcquire(ctx context.Context, req fence.Request) (_ fence.Claim, err error) {
	defer func() { err = markUnavailable(ctx, err) }()
	conn, err := d.take(ctx)
	if err != nil {
		return nil, fmt.Errorf("fencepg: acquire %q: %w", req.Key, err)
	}
	lk := d.lockOf(req)
	var token int64
	err = conn.QueryRow(ctx, lk.try, req.Key, lk.id, req.Owner, metaArg(req.Meta)).Scan(&token)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		// The lock may have been granted before the statement failed.
		d.acquired()
		d.drop(conn, err)
		return nil, d.acquireError(ctx, req, lk.id, err)
	}
	if err != nil { // no row: not granted
		d.acquired()
		d.put(conn)
		if req.Kind != fence.KindLock || req.SkipHolder {
			// The holder's read joins pg_locks, which holds all of the
			// server's lock-table partitions at once (every advisory lock
			// and unlock waits for them): with many waiters queued, it
			// slowed every handoff several times over.
			return nil, &fence.HeldError{Key: req.Key}
		}
		return nil, d.heldError(ctx, req.Key, lk.id)
	}
	return d.newClaim(conn, req, lk, token), nil
}

// Acquire implements fence.BlockingAcquirer: it waits in the server
// (pg_advisory_lock, or pg_advisory_lock_shared for a reader) and bumps
// the token once granted, in one statement. When ctx ends first it
// cancels the wait in the server and closes the connection, so no lock
// and no queued request is left behind.
func (d *SessionStore) Acquire(ctx context.Context, req fence.Request) (_ fence.Claim, err error) {
	defer func() { err = markUnavailable(ctx, err) }()
	conn, err := d.take(ctx)
	if err != nil {
		return nil, fmt.Errorf("fencepg: acquire %q: %w", req.Key, err)
	}
	lk := d.lockOf(req)
	var token int64
	err = waitLock(ctx, conn, func() error {
		return conn.QueryRow(context.Background(), lk.waitBump, req.Key, lk.id, req.Owner, metaArg(req.Meta)).Scan(&token)
	})
	var pgErr *pgconn.PgError
	if err != nil && ctx.Err() == nil && errors.As(err, &pgErr) && pgErr.Code == "40001" {
		// The lock is held (a session lock outlives the failed
		// statement); only the bump, under a stricter isolation than
		// READ COMMITTED, failed: bump with a fresh snapshot.
		err = conn.QueryRow(ctx, lk.bump, req.Key, lk.id, req.Owner, metaArg(req.Meta)).Scan(&token)
	}
	if err != nil {
		d.acquired()
		if ctx.Err() != nil {
			_ = conn.Close(context.Background())
			return nil, ctx.Err()
		}
		// The lock may have been granted before the statement failed.
		d.drop(conn, err)
		return nil, d.acquireError(ctx, req, lk.id, err)
	}
	return d.newClaim(conn, req, lk, token), nil
}

// waitLock runs wait, a statement on conn that waits for an advisory
// lock, until it ends or ctx ends. On ctx's end it sends the server cancel
// requests for the wait until the statement ends (cancelwait), and after
// a grace period cuts the connection, so that the server is no longer
// waiting when it returns; it returns ctx's error even if the lock was
// granted meanwhile (the caller closes the connection, which frees it,
// and never reuses it: a cancel request may still be on its way).
func waitLock(ctx context.Context, conn *pgx.Conn, wait func() error) error {
	return cancelwait.Run(ctx, func(cctx context.Context, hard bool) {
		if hard {
			_ = conn.PgConn().Conn().SetDeadline(time.Now())
			return
		}
		_ = conn.PgConn().CancelRequest(cctx)
	}, wait)
}

func (d *SessionStore) acquireError(ctx context.Context, req fence.Request, id int64, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		if req.Kind != fence.KindLock {
			return fmt.Errorf("%w: %s %q maps to %d, which another key of the kinds table uses", ErrKeyCollision, req.Kind, req.Key, id)
		}
		return d.collision(ctx, req.Key, id)
	}
	return fmt.Errorf("fencepg: acquire %q: %w", req.Key, err)
}

func (d *SessionStore) collision(ctx context.Context, key string, id int64) error {
	var other string
	_ = d.pool.QueryRow(ctx, `SELECT key FROM `+d.ts.tokens.quoted+` WHERE lock_id = $1`, id).Scan(&other)
	return fmt.Errorf("%w: %q and %.64q both map to %d", ErrKeyCollision, key, other, id)
}

// heldError returns the *fence.HeldError for key, with its holder if it
// can be read.
func (d *SessionStore) heldError(ctx context.Context, key string, id int64) error {
	hs, err := d.holders(ctx, d.qHolder, id)
	if err != nil || len(hs) == 0 {
		return &fence.HeldError{Key: key}
	}
	if hs[0].Key != key {
		return fmt.Errorf("%w: %q and %.64q both map to %d", ErrKeyCollision, key, hs[0].Key, id)
	}
	return &fence.HeldError{Key: key, Holder: &hs[0]}
}

// Inspect implements fence.Inspector from pg_locks and the tokens table.
func (d *SessionStore) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	if err := d.ensureSetup(ctx); err != nil {
		return fence.Holder{}, err
	}
	hs, err := d.holders(ctx, d.qHolder, AdvisoryID(key))
	if err != nil {
		return fence.Holder{}, fmt.Errorf("fencepg: inspect %q: %w", key, err)
	}
	if len(hs) == 0 || hs[0].Key != key {
		return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
	}
	return hs[0], nil
}

// List implements fence.Lister.
func (d *SessionStore) List(ctx context.Context, prefix string) ([]fence.Holder, error) {
	if err := d.ensureSetup(ctx); err != nil {
		return nil, err
	}
	hs, err := d.holders(ctx, d.qList, prefix)
	if err != nil {
		return nil, fmt.Errorf("fencepg: list %q: %w", prefix, err)
	}
	return hs, nil
}

func (d *SessionStore) holders(ctx context.Context, q string, arg any) ([]fence.Holder, error) {
	rows, err := d.pool.Query(ctx, q, arg)
	if err != nil {
		return nil, err
	}
	hs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (fence.Holder, error) {
		var h fence.Holder
		err := r.Scan(&h.Key, &h.Owner, &h.Token, &h.Meta)
		return h, err
	})
	slices.SortFunc(hs, func(a, b fence.Holder) int { return cmp.Compare(a.Key, b.Key) })
	return hs, err
}

func (d *SessionStore) newClaim(conn *pgx.Conn, req fence.Request, lk advisoryLock, token int64) *sessionClaim {
	c := &sessionClaim{d: d, conn: conn, key: req.Key, owner: req.Owner, id: lk.id, unlock: lk.unlock, token: token, Note: lossnote.New()}
	d.mu.Lock()
	d.active[c] = struct{}{}
	d.acquiring--
	d.mu.Unlock()
	c.pendingWatch = d.watches.Add(c.startWatch)
	return c
}

// sessionClaim is one session-mode lease: its lock is held by conn.
type sessionClaim struct {
	d              *SessionStore
	conn           *pgx.Conn
	key            string
	owner          string
	id             int64
	token          int64
	*lossnote.Note // NotifyLost
	// unlock is the statement that releases the lock:
	// pg_advisory_unlock, or pg_advisory_unlock_shared for a reader.
	unlock string

	pendingWatch *delayq.Item // the watch's start, until it starts or is cancelled
	watchStop    context.CancelFunc
	watchDone    chan struct{}
	pending      chan checkResult // a renewal check still running, if any
}

func (c *sessionClaim) Token() int64 { return c.token }

// watchDelay is how long after the grant a lease's connection starts being
// watched (a renewal starts the watch sooner). Most leases of a busy key
// are released before: a watch costs two goroutines and a deadline to
// interrupt its read, a good share of an uncontended acquire + release
// (docs/performance.md). A connection that ended meanwhile is seen the
// moment its watch starts.
const watchDelay = 100 * time.Millisecond

// startWatch starts reading the idle connection, so that its end (the
// server terminating the backend, a broken network) is seen at once and
// reported to the Client (NotifyLost). Nothing else is sent on the
// connection while it runs.
func (c *sessionClaim) startWatch() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	c.watchStop, c.watchDone = cancel, done
	go func() {
		defer close(done)
		for {
			err := c.conn.PgConn().WaitForNotification(ctx)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				c.Report(fmt.Errorf("fencepg: session of %q ended: %w", c.key, err))
				_ = c.conn.Close(context.Background())
				c.d.mu.Lock()
				delete(c.d.active, c)
				c.d.mu.Unlock()
				return
			}
		}
	}()
}

func (c *sessionClaim) stopWatch() {
	if c.pendingWatch != nil {
		ran := c.pendingWatch.Cancel()
		c.pendingWatch = nil
		if !ran {
			return
		}
	}
	if c.watchStop != nil {
		c.watchStop()
		<-c.watchDone
		c.watchStop = nil
	}
}

// discard closes the connection (freeing the lock in the server) and
// forgets the claim.
func (c *sessionClaim) discard() {
	_ = c.conn.Close(context.Background())
	c.d.mu.Lock()
	delete(c.d.active, c)
	c.d.mu.Unlock()
}

func (c *sessionClaim) sessionGone(err error) error {
	return fmt.Errorf("%w: %q: the session holding it ended: %v", fence.ErrNotHeld, c.key, err)
}

// Extend checks that the connection is alive and still holds the lock. An
// advisory lock has no expiry to push: it lasts as long as the session.
//
// The check runs without a deadline: a statement cut short would leave the
// connection unusable and so drop the lock, while a slow check only means
// that this renewal fails (and, if none succeeds in time, that the lease
// ends locally; the lock stays held until Release). A check still running
// when ctx ends is waited for by the next Extend or the Release.
func (c *sessionClaim) Extend(ctx context.Context, _ time.Duration) error {
	c.stopWatch()
	if c.pending == nil {
		// Not while a check still runs on the connection: the connection
		// is not safe for concurrent use, even to ask whether it is closed.
		if c.conn.IsClosed() {
			c.discard()
			return c.sessionGone(errors.New("connection closed"))
		}
		c.pending = make(chan checkResult, 1)
		classid, objid := lockParts(c.id)
		go func(done chan<- checkResult) {
			var r checkResult
			r.err = c.conn.QueryRow(context.Background(), c.d.qMine, classid, objid).Scan(&r.mine)
			done <- r
		}(c.pending)
	}
	var r checkResult
	select {
	case r = <-c.pending:
		c.pending = nil
	case <-ctx.Done():
		return fmt.Errorf("fencepg: extend %q: the check is still running: %w", c.key, ctx.Err())
	}
	switch {
	case r.err != nil && c.conn.IsClosed():
		c.discard()
		return c.sessionGone(r.err)
	case r.err != nil:
		c.startWatch()
		return fmt.Errorf("fencepg: extend %q: %w", c.key, r.err)
	case !r.mine:
		c.discard()
		return fmt.Errorf("%w: %q: its session no longer holds the advisory lock", fence.ErrNotHeld, c.key)
	}
	c.startWatch()
	return nil
}

type checkResult struct {
	mine bool
	err  error
}

// Release unlocks and keeps the connection for a later lease; if anything
// goes wrong it closes the connection, which frees the lock too.
func (c *sessionClaim) Release(ctx context.Context) error {
	c.stopWatch()
	if c.pending != nil {
		select {
		case <-c.pending:
			c.pending = nil
		case <-ctx.Done():
			// The connection is stuck in a check: cut it, which frees the
			// lock when the server sees it end.
			_ = c.conn.PgConn().Conn().SetDeadline(time.Now())
			<-c.pending
			c.discard()
			return fmt.Errorf("fencepg: release %q: %w (connection closed, which frees the lock)", c.key, ctx.Err())
		}
	}
	if c.conn.IsClosed() {
		c.discard()
		return c.sessionGone(errors.New("connection closed"))
	}
	var unlocked bool
	err := c.conn.QueryRow(ctx, c.unlock, c.id).Scan(&unlocked)
	c.d.mu.Lock()
	delete(c.d.active, c)
	c.d.mu.Unlock()
	switch {
	case err != nil:
		gone := c.conn.IsClosed()
		c.discard()
		if gone {
			return c.sessionGone(err)
		}
		return fmt.Errorf("fencepg: release %q: %w (connection closed, which frees the lock)", c.key, err)
	case !unlocked:
		c.discard()
		return fmt.Errorf("%w: %q: its session no longer held the advisory lock", fence.ErrNotHeld, c.key)
	}
	c.d.put(c.conn)
	return nil
}
