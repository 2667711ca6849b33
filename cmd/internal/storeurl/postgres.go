package storeurl

import (
	"context"
	"errors"
	"io"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencepg"
)

func init() {
	forms := []string{
		"postgres://user:pass@host:5432/db (lease mode)",
		"postgres://user:pass@host/db?mode=session",
	}
	// pgx takes a password in the user info or as password=, and the
	// passphrase of an encrypted TLS client key as sslpassword=.
	credentials := []string{"password", "sslpassword"}
	register("postgres", scheme{open: openPostgres, forms: forms, credentials: credentials})
	register("postgresql", scheme{open: openPostgres, forms: []string{"postgresql://... (as postgres://)"}, credentials: credentials})
}

// openPostgres opens postgres:// and postgresql:// URLs with pgx. fence's
// own parameters, removed before the URL reaches pgx:
//
//	mode=lease|session  the fencepg mode (default lease)
//	locks_table=NAME    lease mode's table (default fence_locks)
//	tokens_table=NAME   session mode's counter table (default fence_tokens)
//	kinds_table=NAME    semaphores' and reader-writer locks' table (default fence_kinds)
//	setup=auto|off      create the tables if missing (default auto)
//
// Every other parameter is pgx's (sslmode, connect_timeout, ...).
func openPostgres(ctx context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
	q := u.Query()
	mode := q.Get("mode")
	tables := fencepg.Tables{Locks: q.Get("locks_table"), Tokens: q.Get("tokens_table"), Kinds: q.Get("kinds_table")}
	setup := q.Get("setup")
	for _, p := range []string{"mode", "locks_table", "tokens_table", "kinds_table", "setup"} {
		q.Del(p)
	}
	switch setup {
	case "", "auto", "off":
	default:
		return nil, nil, badURL(u, "setup=%q: want auto or off", setup)
	}
	pu := *u
	pu.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(pu.String())
	if err != nil {
		return nil, nil, badURL(u, "%s", pgxConfigError(err))
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
		d, err := fencepg.NewLeaseStore(pool, opts...)
		if err != nil {
			pool.Close()
			return nil, nil, badURL(u, "%v", err)
		}
		drv, closer = d, d.Close
	case "session":
		d, err := fencepg.NewSessionStore(pool, opts...)
		if err != nil {
			pool.Close()
			return nil, nil, badURL(u, "%v", err)
		}
		drv, closer = d, d.Close
	default:
		pool.Close()
		return nil, nil, badURL(u, "mode=%q: want lease or session (transaction mode works inside a program's own transaction only)", mode)
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

// pgxConfigError says why pgx refused a connection URL. pgx's message
// repeats the whole URL, masking the passwords it recognizes; here the
// URL is left out of the error's structure (the message names it
// already), and a URL syntax error is told without its URL.
func pgxConfigError(err error) string {
	var pce *pgconn.ParseConfigError
	if !errors.As(err, &pce) {
		return err.Error()
	}
	var ue *url.Error
	if errors.As(pce.Unwrap(), &ue) {
		return parseReason(ue)
	}
	c := *pce
	c.ConnString = ""
	return strings.TrimPrefix(c.Error(), "cannot parse ``: ")
}
