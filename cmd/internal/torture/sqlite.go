package torture

import (
	"net/url"
	"os"
	"path/filepath"
	"time"

	"github.com/fencing/fence/internal/testkit/testserver"
)

// The SQLite store is a database file in a new temporary directory: no
// server and no network (the blackhole and delay faults do not apply),
// leases that expire while their holder is stopped (the pause bites).
func init() {
	kinds["sqlite"] = kind{about: "lease rows in an SQLite file in a new temporary directory (fencesqlite)",
		scheme: "sqlite", open: openSQLiteStore}
}

func openSQLiteStore(*testserver.Env) (*Store, error) {
	dir, err := os.MkdirTemp("", "fence-torture-sqlite-")
	if err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "fence.db")
	u := (&url.URL{Scheme: "sqlite", Path: path}).String()
	return &Store{
		url:   func([]string, time.Duration) string { return u },
		wipe:  wipeSQLite(path),
		close: func() { _ = os.RemoveAll(dir) },
	}, nil
}
