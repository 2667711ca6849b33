package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencepg"
)

// pgDriver is a fencepg driver: lease or session mode.
type pgDriver interface {
	fence.Driver
	Close() error
}

// openFencePG opens a fence Client over the driver newDriver makes on a
// pool of its own.
func openFencePG(dsn string, newDriver func(*pgxpool.Pool) (pgDriver, error)) func(context.Context, *atomic.Int64) (Client, error) {
	return func(ctx context.Context, rt *atomic.Int64) (Client, error) {
		pool, err := newPool(ctx, dsn, rt)
		if err != nil {
			return nil, err
		}
		d, err := newDriver(pool)
		if err != nil {
			pool.Close()
			return nil, err
		}
		return &fenceClient{c: fence.New(d, fence.WithTTL(TTL)), close: func() error {
			err := d.Close()
			pool.Close()
			return err
		}}, nil
	}
}

func postgresContenders(dsn string) []Contender {
	return []Contender{
		{Store: "postgres", Name: "fence-lease", Role: RoleFence,
			Desc: "fencepg lease mode: INSERT .. ON CONFLICT .. RETURNING + UPDATE with pg_notify; waiters wake on LISTEN/NOTIFY",
			Open: openFencePG(dsn, func(p *pgxpool.Pool) (pgDriver, error) { return fencepg.NewLeaseStore(p) })},
		{Store: "postgres", Name: "fence-session", Role: RoleFence,
			Desc: "fencepg session mode: pg_try_advisory_lock + token bump in one statement, pg_advisory_unlock; waiters wait in the server",
			Open: openFencePG(dsn, func(p *pgxpool.Pool) (pgDriver, error) { return fencepg.NewSessionStore(p) })},
		{Store: "postgres", Name: "pgx-advisory", Role: RolePeer,
			Desc: "plain pg_advisory_lock + pg_advisory_unlock through pgx on a pooled connection, no token; waiters wait in the server",
			Open: func(ctx context.Context, rt *atomic.Int64) (Client, error) {
				pool, err := newPool(ctx, dsn, rt)
				if err != nil {
					return nil, err
				}
				return &advisoryClient{pool: pool}, nil
			}},
		{Store: "postgres", Name: "raw-lease", Role: RoleRaw,
			Desc: "one INSERT .. ON CONFLICT DO UPDATE .. RETURNING token (greatest(token + 1, clock in µs), as fence's) + one UPDATE .. RETURNING pg_notify; waiters wake on LISTEN/NOTIFY",
			Open: func(ctx context.Context, rt *atomic.Int64) (Client, error) {
				pool, err := newPool(ctx, dsn, rt)
				if err != nil {
					return nil, err
				}
				return &rawLeaseClient{pool: pool}, nil
			}},
		{Store: "postgres", Name: "raw-advisory", Role: RoleRaw,
			Desc: "one statement: pg_advisory_lock + token bump (INSERT .. ON CONFLICT .. RETURNING, greatest(token + 1, clock in µs)), then pg_advisory_unlock; waiters wait in the server",
			Open: func(ctx context.Context, rt *atomic.Int64) (Client, error) {
				pool, err := newPool(ctx, dsn, rt)
				if err != nil {
					return nil, err
				}
				return &advisoryClient{pool: pool, token: true}, nil
			}},
	}
}

func newPool(ctx context.Context, dsn string, rt *atomic.Int64) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.Tracer = pgCounter{rt}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// pgCounter counts round trips: one per statement.
type pgCounter struct{ n *atomic.Int64 }

func (c pgCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (pgCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// setupPostgres creates fencepg's tables and the raw contenders' tables.
func setupPostgres(ctx context.Context, dsn string) error {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := fencepg.Setup(ctx, pool); err != nil {
		return err
	}
	_, err = pool.Exec(ctx, `
		CREATE TABLE IF NOT EXISTS raw_leases (key text PRIMARY KEY, owner text, token bigint NOT NULL, expires_at timestamptz NOT NULL);
		CREATE TABLE IF NOT EXISTS raw_tokens (key text PRIMARY KEY, token bigint NOT NULL)`)
	return err
}

// lockID maps a key to an advisory lock id (FNV-1a, 64 bits).
func lockID(key string) int64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= 1099511628211
	}
	return int64(h)
}

// advisoryClient is a session advisory lock on a pooled connection:
// without token (the plain pgx peer) or with the raw token bump in the
// same statement.
type advisoryClient struct {
	pool  *pgxpool.Pool
	token bool
}

func (a *advisoryClient) Locker() Locker { return &advisoryLocker{pool: a.pool, token: a.token} }

func (a *advisoryClient) Close() error {
	a.pool.Close()
	return nil
}

type advisoryLocker struct {
	pool  *pgxpool.Pool
	token bool
	conn  *pgxpool.Conn
	id    int64
	tok   int64
}

// pgClock is the server's clock in microseconds. The raw floors issue
// fence's token, greatest(counter + 1, pgClock), so that a counter that
// goes back (a failover to an asynchronous replica, a restored backup)
// never issues an old token again: the same job as fencepg's.
const pgClock = `(extract(epoch FROM clock_timestamp()) * 1000000)::bigint`

// The raw floor of session mode: wait for the lock in the server, then
// bump the token in the same statement (ON CONFLICT DO UPDATE sees the
// latest committed counter, whatever the statement's snapshot).
const rawAdvisoryLock = `WITH lk AS (SELECT pg_advisory_lock($2))
	INSERT INTO raw_tokens AS t (key, token) SELECT $1, ` + pgClock + ` FROM lk
	ON CONFLICT (key) DO UPDATE SET token = greatest(t.token + 1, ` + pgClock + `)
	RETURNING t.token`

func (a *advisoryLocker) Lock(ctx context.Context, key string) error {
	conn, err := a.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	a.id = lockID(key)
	if a.token {
		err = conn.QueryRow(ctx, rawAdvisoryLock, key, a.id).Scan(&a.tok)
	} else {
		_, err = conn.Exec(ctx, "SELECT pg_advisory_lock($1)", a.id)
	}
	if err != nil {
		// A cancelled wait may leave the lock taken or pending: drop the
		// connection rather than return it to the pool.
		_ = conn.Conn().Close(context.Background())
		conn.Release()
		return err
	}
	a.conn = conn
	return nil
}

func (a *advisoryLocker) Unlock(ctx context.Context) error {
	conn := a.conn
	a.conn = nil
	var ok bool
	err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", a.id).Scan(&ok)
	if err == nil && !ok {
		err = errors.New("pg_advisory_unlock: not held")
	}
	if err != nil {
		_ = conn.Conn().Close(context.Background())
	}
	conn.Release()
	return err
}

// raw lease mode: a row per key with owner, token and expiry.

const (
	rawLeaseAcquire = `INSERT INTO raw_leases AS l (key, owner, token, expires_at)
		VALUES ($1, $2, ` + pgClock + `, clock_timestamp() + $3::bigint * interval '1 millisecond')
		ON CONFLICT (key) DO UPDATE SET owner = EXCLUDED.owner, token = greatest(l.token + 1, ` + pgClock + `), expires_at = EXCLUDED.expires_at
		WHERE l.owner IS NULL OR l.expires_at <= clock_timestamp()
		RETURNING l.token`
	rawLeaseRelease = `UPDATE raw_leases SET owner = NULL WHERE key = $1 AND owner = $2
		RETURNING pg_notify('raw_leases', $1)::text`
)

type rawLeaseClient struct{ pool *pgxpool.Pool }

func (r *rawLeaseClient) Locker() Locker {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &rawLeaseLocker{pool: r.pool, id: hex.EncodeToString(b[:]) + "-"}
}

func (r *rawLeaseClient) Close() error {
	r.pool.Close()
	return nil
}

type rawLeaseLocker struct {
	pool       *pgxpool.Pool
	id         string
	n          int64
	key, owner string
	tok        int64
	listen     *pgx.Conn // LISTEN raw_leases, once contended
}

func (r *rawLeaseLocker) try(ctx context.Context) (bool, error) {
	r.n++
	r.owner = r.id + strconv.FormatInt(r.n, 10)
	err := r.pool.QueryRow(ctx, rawLeaseAcquire, r.key, r.owner, TTL.Milliseconds()).Scan(&r.tok)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func (r *rawLeaseLocker) Lock(ctx context.Context, key string) error {
	r.key = key
	if ok, err := r.try(ctx); ok || err != nil {
		return err
	}
	if r.listen == nil {
		cfg := r.pool.Config().ConnConfig.Copy()
		// A wait's timeout only interrupts the read; the default handler
		// would also send the server a cancel request.
		cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
		}
		conn, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, "LISTEN raw_leases"); err != nil {
			_ = conn.Close(context.Background())
			return err
		}
		r.listen = conn
	}
	for {
		if ok, err := r.try(ctx); ok || err != nil {
			return err
		}
		for {
			wctx, cancel := context.WithTimeout(ctx, time.Second) // a lost message costs at most this
			n, err := r.listen.WaitForNotification(wctx)
			cancel()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if err != nil || n.Payload == key {
				break
			}
		}
	}
}

func (r *rawLeaseLocker) Unlock(ctx context.Context) error {
	err := r.pool.QueryRow(ctx, rawLeaseRelease, r.key, r.owner).Scan(nil)
	if errors.Is(err, pgx.ErrNoRows) {
		return errors.New("raw lease: not ours")
	}
	return err
}

func (r *rawLeaseLocker) close() {
	if r.listen != nil {
		_ = r.listen.Close(context.Background())
	}
}
