package fencesqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencesqlite"
	"github.com/fencing/fence/fencetest"
)

// The suite's contender processes open the same database file: the
// connect string is its path.
func TestConformance(t *testing.T) {
	fencetest.Run(t, fencetest.Config{
		Setup: func(t *testing.T) fencetest.Store {
			s := open(t, filepath.Join(t.TempDir(), "fence.db"))
			db := s.DB()
			return fencetest.Store{
				Connect: s.Path(),
				// Deleting a lease behind its holder's back clears the row's
				// owner, keeping its token, as a takeover would.
				Delete: func(ctx context.Context, key string) error {
					_, err := db.ExecContext(ctx, `UPDATE fence_locks SET owner = NULL WHERE key = ?`, key)
					return err
				},
				// A lost row: the next token comes from the clock.
				Wipe: func(ctx context.Context, key string) error {
					_, err := db.ExecContext(ctx, `DELETE FROM fence_locks WHERE key = ?`, key)
					return err
				},
				// Rows stay after release (they keep the tokens); what must
				// not stay is a live lease.
				Leftovers: func(ctx context.Context, prefix string) ([]string, error) {
					return liveKeys(ctx, db, prefix)
				},
			}
		},
		Open: func(path string) (fence.Driver, func() error, error) {
			s, err := fencesqlite.Open(path)
			if err != nil {
				return nil, nil, err
			}
			return s, s.Close, nil
		},
	})
}

func liveKeys(ctx context.Context, db *sql.DB, prefix string) ([]string, error) {
	rows, err := db.QueryContext(ctx, `SELECT key FROM fence_locks WHERE owner IS NOT NULL
		AND expires_us > unixepoch('subsec') * 1000000 ORDER BY key`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var keys []string
	for rows.Next() {
		var k string
		if err := rows.Scan(&k); err != nil {
			return nil, err
		}
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	return keys, rows.Err()
}
