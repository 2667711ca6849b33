package storeurl

import (
	"context"
	"io"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencesqlite"
)

func init() {
	register("sqlite", scheme{open: openSQLite, local: true,
		forms: []string{"sqlite:///path/to/fence.db[?busy_timeout=5s]"}})
}

// openSQLite opens sqlite:///abs/path.db (or sqlite://localhost/abs/path.db):
// the database file of processes of this host, created if missing in a
// directory that exists. busy_timeout bounds the wait for another
// process's write transaction (default 5s).
func openSQLite(_ context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
	switch {
	case u.Opaque != "":
		return nil, nil, badURL(u, "an sqlite URL needs an absolute path: sqlite:///path/to/fence.db")
	case u.Host != "" && u.Host != "localhost":
		return nil, nil, badURL(u, "an SQLite store is on this host only; host %q not allowed", u.Host)
	case u.Path == "" || !filepath.IsAbs(u.Path):
		return nil, nil, badURL(u, "an sqlite URL needs an absolute path: sqlite:///path/to/fence.db")
	case strings.HasSuffix(u.Path, "/"):
		return nil, nil, badURL(u, "an sqlite URL names the database file, not a directory")
	}
	var opts []fencesqlite.Option
	for name, vals := range u.Query() {
		switch name {
		case "busy_timeout":
			d, err := time.ParseDuration(vals[len(vals)-1])
			if err != nil || d < time.Millisecond {
				return nil, nil, badURL(u, "busy_timeout %q: a duration of at least 1ms, such as 5s", vals[len(vals)-1])
			}
			opts = append(opts, fencesqlite.WithBusyTimeout(d))
		default:
			return nil, nil, badURL(u, "unknown parameter %q; an sqlite URL takes busy_timeout", name)
		}
	}
	s, err := fencesqlite.Open(filepath.Clean(u.Path), opts...)
	if err != nil {
		return nil, nil, err
	}
	return s, s, nil
}
