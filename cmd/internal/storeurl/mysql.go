package storeurl

import (
	"context"
	"database/sql"
	"io"
	"net"
	"net/url"
	"strings"

	"github.com/go-sql-driver/mysql"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemysql"
)

func init() {
	register("mysql", scheme{open: openMySQL, hostOptional: true, forms: []string{
		"mysql://user:pass@host:3306/db (MySQL 8, MariaDB)",
		"mysql://user@/db?socket=/run/mysqld/mysqld.sock",
	}})
}

// openMySQL opens mysql:// URLs with go-sql-driver/mysql: the host (port
// 3306 if none) or ?socket=PATH, the database in the path. fence's own
// parameters:
//
//	table=NAME     the counter table (default fence_tokens)
//	prefix=NAME    the lock name prefix (default fence)
//	setup=auto|off create the table if missing (default auto)
//
// Every other parameter is the driver's (tls, timeout, ...).
func openMySQL(ctx context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
	q := u.Query()
	if q.Has("password") {
		// The driver would send it to the server as "SET password=...",
		// which changes the user's password.
		return nil, nil, badURL(u, "give the password in the user info (mysql://user:password@host/db), not as password=")
	}
	var opts []fencemysql.Option
	if t := q.Get("table"); t != "" {
		opts = append(opts, fencemysql.WithTable(t))
	}
	if p := q.Get("prefix"); p != "" {
		opts = append(opts, fencemysql.WithPrefix(p))
	}
	switch s := q.Get("setup"); s {
	case "", "auto":
		opts = append(opts, fencemysql.WithAutoSetup())
	case "off":
	default:
		return nil, nil, badURL(u, "setup=%q: want auto or off", s)
	}
	cfg := mysql.NewConfig()
	if u.User != nil {
		cfg.User = u.User.Username()
		cfg.Passwd, _ = u.User.Password()
	}
	cfg.DBName = strings.TrimPrefix(u.Path, "/")
	if cfg.DBName == "" || strings.Contains(cfg.DBName, "/") {
		return nil, nil, badURL(u, "name one database in the path: mysql://user@host/db")
	}
	switch sock := q.Get("socket"); {
	case sock != "" && u.Host != "":
		return nil, nil, badURL(u, "give a host or ?socket=, not both")
	case sock != "":
		cfg.Net, cfg.Addr = "unix", sock
	case u.Host == "":
		return nil, nil, badURL(u, "no host: mysql://user@host/db, or mysql://user@/db?socket=PATH")
	default:
		cfg.Net, cfg.Addr = "tcp", u.Host
		if u.Port() == "" {
			cfg.Addr = net.JoinHostPort(u.Hostname(), "3306")
		}
	}
	for _, p := range []string{"table", "prefix", "setup", "socket"} {
		q.Del(p)
	}
	if len(q) > 0 {
		// Let the driver parse its own parameters, from a DSN without the
		// password: its errors may quote the DSN.
		passwd := cfg.Passwd
		cfg.Passwd = ""
		parsed, err := mysql.ParseDSN(cfg.FormatDSN() + "?" + q.Encode())
		if err != nil {
			return nil, nil, badURL(u, "%v", err)
		}
		cfg = parsed
		cfg.Passwd = passwd
	}
	connector, err := mysql.NewConnector(cfg)
	if err != nil {
		return nil, nil, badURL(u, "%v", err)
	}
	db := sql.OpenDB(connector)
	d, err := fencemysql.New(db, opts...)
	if err != nil {
		db.Close()
		return nil, nil, badURL(u, "%v", err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, nil, err
	}
	return d, closeFunc(func() error { err := d.Close(); db.Close(); return err }), nil
}
