package torture

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencepg"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// pgRegister is the fenced register as a PostgreSQL table, guarded by
// fencepg's guard inside each write's transaction: the way a real
// resource is protected. Each write locks the key's register row, asks the
// guard to admit its token (unless --no-guard), updates the row and
// appends to a log table, in one transaction; the log's order is the
// order of the writes. In guard-only mode the write asks the guard first
// and takes no lock of its own: the guard's own row lock is all that
// orders the writes of a key, as in a resource whose write is a plain
// UPDATE after the guard.
type pgRegister struct {
	pool *pgxpool.Pool
	dsn  *url.URL
	keys []string
}

const pgSchema = `
CREATE TABLE IF NOT EXISTS torture_register (
	key   text PRIMARY KEY,
	token bigint NOT NULL,
	val   text   NOT NULL,
	high  bigint NOT NULL -- the highest token accepted
);
CREATE TABLE IF NOT EXISTS torture_broken_guard (
	resource text PRIMARY KEY,
	token    bigint NOT NULL
);
CREATE TABLE IF NOT EXISTS torture_log (
	seq      bigserial PRIMARY KEY,
	key      text    NOT NULL,
	token    bigint  NOT NULL,
	val      text    NOT NULL,
	accepted boolean NOT NULL,
	stale    boolean NOT NULL,
	highest  bigint  NOT NULL
)`

func newPGRegister(ctx context.Context, dsn string, keys []string) (*pgRegister, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return nil, fmt.Errorf("register DSN: %w", err)
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, err
	}
	r := &pgRegister{pool: pool, dsn: u, keys: keys}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, fencepg.AdvisoryID("fence-torture setup")); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, pgSchema); err != nil {
			return err
		}
		for _, k := range keys {
			if _, err := tx.Exec(ctx, `INSERT INTO torture_register (key, token, val, high) VALUES ($1, 0, '', 0) ON CONFLICT DO NOTHING`, k); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		err = fencepg.Setup(ctx, pool)
	}
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("setting up the register: %w", err)
	}
	return r, nil
}

func (r *pgRegister) Addr() string { return r.dsn.Host }

func (r *pgRegister) ClientURL(addr string) string {
	u := *r.dsn
	u.Host = addr
	return u.String()
}

func (r *pgRegister) Close() error {
	r.pool.Close()
	return nil
}

func (r *pgRegister) Log(ctx context.Context) ([]Applied, error) {
	rows, err := r.pool.Query(ctx, `SELECT key, token, val, accepted, stale, highest FROM torture_log WHERE key = ANY($1) ORDER BY seq`, r.keys)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Applied, error) {
		var a Applied
		err := row.Scan(&a.Key, &a.Token, &a.Val, &a.Accepted, &a.Stale, &a.Highest)
		return a, err
	})
}

// pgRegisterClient is a worker's connection to a pgRegister.
type pgRegisterClient struct {
	pool      *pgxpool.Pool
	guard     *fencepg.Guard
	noGuard   bool
	guardOnly bool
	wait      time.Duration // see Config.guardWait
	broken    bool          // see Config.brokenGuard
}

func newPGRegisterClient(ctx context.Context, dsn string, noGuard, guardOnly bool, wait time.Duration, broken bool) (*pgRegisterClient, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	guard, err := fencepg.NewGuard()
	if err != nil {
		pool.Close()
		return nil, err
	}
	return &pgRegisterClient{pool: pool, guard: guard, noGuard: noGuard, guardOnly: guardOnly, wait: wait, broken: broken}, nil
}

func (c *pgRegisterClient) Close() { c.pool.Close() }

func (c *pgRegisterClient) Write(ctx context.Context, key string, token int64, val string) (string, error) {
	res := ResOK
	err := pgx.BeginFunc(ctx, c.pool, func(tx pgx.Tx) error {
		var high int64
		lock := func() error {
			q := `SELECT high FROM torture_register WHERE key = $1 FOR UPDATE`
			if c.guardOnly {
				q = `SELECT high FROM torture_register WHERE key = $1`
			}
			return tx.QueryRow(ctx, q, key).Scan(&high)
		}
		if !c.guardOnly || c.noGuard {
			if err := lock(); err != nil {
				return err
			}
		}
		if !c.noGuard {
			err := c.admit(ctx, tx, key, token)
			if err == nil && c.guardOnly {
				err = lock() // the value the log compares with, under the guard's lock
			}
			if errors.Is(err, fence.ErrStale) {
				// Refused: nothing changed. Log the refusal in the same
				// transaction (the guard's refusal is no SQL error).
				res = ResStale
				_, err := tx.Exec(ctx, `INSERT INTO torture_log (key, token, val, accepted, stale, highest) VALUES ($1, $2::bigint, $3, false, true, $4::bigint)`,
					key, token, val, high)
				return err
			}
			if err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `UPDATE torture_register SET token = $2, val = $3, high = GREATEST(high, $2) WHERE key = $1`, key, token, val); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO torture_log (key, token, val, accepted, stale, highest) VALUES ($1, $2::bigint, $3, true, $2::bigint < $4::bigint, $4::bigint)`,
			key, token, val, high)
		return err
	})
	if err != nil {
		return ResUnknown, err // the commit may or may not have happened
	}
	return res, nil
}

// admit asks the guard to admit token for key, then waits c.wait. The
// broken guard checks, waits, then writes: two writers can both pass its
// check, and the lower token land last.
func (c *pgRegisterClient) admit(ctx context.Context, tx pgx.Tx, key string, token int64) error {
	if !c.broken {
		err := c.guard.Admit(ctx, tx, key, token)
		if err == nil {
			time.Sleep(c.wait)
		}
		return err
	}
	var high int64
	err := tx.QueryRow(ctx, `SELECT token FROM torture_broken_guard WHERE resource = $1`, key).Scan(&high)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	if token < high {
		return fence.ErrStale
	}
	time.Sleep(c.wait)
	_, err = tx.Exec(ctx, `INSERT INTO torture_broken_guard (resource, token) VALUES ($1, $2)
		ON CONFLICT (resource) DO UPDATE SET token = EXCLUDED.token`, key, token)
	return err
}

func (c *pgRegisterClient) Read(ctx context.Context, key string) (int64, string, error) {
	var (
		token int64
		val   string
	)
	err := c.pool.QueryRow(ctx, `SELECT token, val FROM torture_register WHERE key = $1`, key).Scan(&token, &val)
	return token, val, err
}

// StartRegisterDB starts a private PostgreSQL for the postgres register
// and returns its DSN. It is a server of its own, never the store's, so
// that the store's restart fault leaves the register alone.
func StartRegisterDB(env *testserver.Env) (string, error) {
	var dsn string
	err := env.Do(func(tb testing.TB) { dsn = testserver.Postgres(tb).DSN() })
	return dsn, err
}
