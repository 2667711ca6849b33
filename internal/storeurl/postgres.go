package storeurl

import (
	"context"
	"io"
	"net/url"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencepg"
)

func init() {
	forms := []string{
		"postgres://user:pass@host:5432/db (lease mode)",
		"postgres://user:pass@host/db?mode=session",
	}
	Register("postgres", openPostgres, forms...)
	Register("postgresql", openPostgres, "postgresql://... (as postgres://)")
}

// openPostgres opens postgres:// and postgresql:// URLs with pgx. fence's
// own parameters, removed before the URL reaches pgx:
//
//	mode=lease|session  the fencepg mode (default lease)
//	locks_table=NAME    lease mode's table (default fence_locks)
//	tokens_table=NAME   session mode's counter table (default fence_tokens)
//	setup=auto|off      create the tables if missing (default auto)
//
// Every other parameter is pgx's (sslmode, connect_timeout, ...).
func openPostgres(ctx context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
	raw := u.String()
	q := u.Query()
	mode := q.Get("mode")
	tables := fencepg.Tables{Locks: q.Get("locks_table"), Tokens: q.Get("tokens_table")}
	setup := q.Get("setup")
	for _, p := range []string{"mode", "locks_table", "tokens_table", "setup"} {
		q.Del(p)
	}
	switch setup {
	case "", "auto", "off":
	default:
		return nil, nil, badURL(raw, "setup=%q: want auto or off", setup)
	}
	pu := *u
	pu.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(pu.String())
	if err != nil {
		return nil, nil, badURL(raw, "%v", err)
	}
	opts := []fencepg.Option{fencepg.WithTables(tables)}
	if setup != "off" {
		opts = append(opts, fencepg.WithAutoSetup())
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	var (
		drv    fence.Driver
		closer func() error
	)
	switch mode {
	case "", "lease":
		d, err := fencepg.NewLeaseDriver(pool, opts...)
		if err != nil {
			pool.Close()
			return nil, nil, badURL(raw, "%v", err)
		}
		drv, closer = d, d.Close
	case "session":
		d, err := fencepg.NewSessionDriver(pool, opts...)
		if err != nil {
			pool.Close()
			return nil, nil, badURL(raw, "%v", err)
		}
		drv, closer = d, d.Close
	default:
		pool.Close()
		return nil, nil, badURL(raw, "mode=%q: want lease or session (transaction mode works inside a program's own transaction only)", mode)
	}
	if err := pool.Ping(ctx); err != nil {
		_ = closer()
		pool.Close()
		return nil, nil, err
	}
	return drv, closeFunc(func() error { err := closer(); pool.Close(); return err }), nil
}

type closeFunc func() error

func (f closeFunc) Close() error { return f() }
