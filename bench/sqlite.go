package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencesqlite"
)

// SQLite has no network: a "round trip" here is a transaction that takes
// the database's write lock (and fsyncs the WAL if it wrote), counted by
// commit and rollback hooks on every connection to the contender's file.
// Each contender has a file of its own, so that the hooks know whose
// transaction it is.

var sqliteCounters struct {
	once sync.Once
	mu   sync.Mutex
	byDB map[string]*atomic.Int64 // database path -> the counter of the client that opened it last
}

// countSQLite makes the transactions of connections to path count in rt.
func countSQLite(path string, rt *atomic.Int64) {
	sqliteCounters.once.Do(func() {
		sqliteCounters.byDB = map[string]*atomic.Int64{}
		sqlite.RegisterConnectionHook(func(conn sqlite.ExecQuerierContext, dsn string) error {
			sqliteCounters.mu.Lock()
			var n *atomic.Int64
			for p, c := range sqliteCounters.byDB {
				if strings.Contains(dsn, (&url.URL{Path: p}).EscapedPath()+"?") || strings.HasPrefix(dsn, p+"?") {
					n = c
				}
			}
			sqliteCounters.mu.Unlock()
			if h, ok := conn.(sqlite.HookRegisterer); ok && n != nil {
				h.RegisterCommitHook(func() int32 { n.Add(1); return 0 })
				h.RegisterRollbackHook(func() { n.Add(1) })
			}
			return nil
		})
	})
	sqliteCounters.mu.Lock()
	sqliteCounters.byDB[path] = rt
	sqliteCounters.mu.Unlock()
}

func sqliteContenders(dir string) []Contender {
	return []Contender{
		{Store: "sqlite", Name: "fence", Role: RoleFence,
			Desc: "fencesqlite: one BEGIN IMMEDIATE transaction (INSERT .. ON CONFLICT DO UPDATE .. RETURNING token) + one (UPDATE .. RETURNING), WAL mode; waiters wake on inotify's news of a write to the -wal file",
			Open: func(ctx context.Context, rt *atomic.Int64) (Client, error) {
				path := filepath.Join(dir, "fence.db")
				countSQLite(path, rt)
				s, err := fencesqlite.Open(path)
				if err != nil {
					return nil, err
				}
				return &fenceClient{c: fence.New(s, fence.WithTTL(TTL)), close: s.Close}, nil
			}},
		{Store: "sqlite", Name: "raw", Role: RoleRaw,
			Desc: "the same rows through database/sql with no library: one BEGIN IMMEDIATE transaction (the upsert, token max(token + 1, clock in µs)) + one (UPDATE owner = NULL), WAL mode; waiters poll every 1 to 50 ms",
			Open: func(ctx context.Context, rt *atomic.Int64) (Client, error) {
				path := filepath.Join(dir, "raw.db")
				countSQLite(path, rt)
				return openRawSQLite(ctx, path)
			}},
	}
}

// sqliteVersion opens a database in dir and asks SQLite its version.
func sqliteVersion(ctx context.Context, dir string) string {
	db, err := sql.Open("sqlite", filepath.Join(dir, "version.db"))
	if err != nil {
		return "?"
	}
	defer db.Close()
	var v string
	if err := db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&v); err != nil {
		return "?"
	}
	return v
}

const (
	rawSQLiteAcquire = `INSERT INTO raw_leases AS l (key, owner, token, expires_us) VALUES (?1, ?2, ?3, ?4)
		ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, token = max(l.token + 1, ?3), expires_us = excluded.expires_us
		WHERE l.owner IS NULL OR l.expires_us <= ?3
		RETURNING token`
	rawSQLiteRelease = `UPDATE raw_leases SET owner = NULL WHERE key = ?1 AND owner = ?2`
)

type rawSQLiteClient struct{ db *sql.DB }

func openRawSQLite(ctx context.Context, path string) (Client, error) {
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() +
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(wal)&_txlock=immediate"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS raw_leases
		(key TEXT PRIMARY KEY, owner TEXT, token INTEGER NOT NULL, expires_us INTEGER NOT NULL)`); err != nil {
		db.Close()
		return nil, err
	}
	return &rawSQLiteClient{db: db}, nil
}

func (r *rawSQLiteClient) Locker() Locker {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &rawSQLiteLocker{db: r.db, id: hex.EncodeToString(b[:]) + "-"}
}

func (r *rawSQLiteClient) Close() error { return r.db.Close() }

type rawSQLiteLocker struct {
	db         *sql.DB
	id         string
	n          int64
	key, owner string
	tok        int64
}

func (r *rawSQLiteLocker) try(ctx context.Context) (bool, error) {
	r.n++
	r.owner = r.id + strconv.FormatInt(r.n, 10)
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return false, err
	}
	now := time.Now().UnixMicro()
	err = tx.QueryRowContext(ctx, rawSQLiteAcquire, r.key, r.owner, now, now+TTL.Microseconds()).Scan(&r.tok)
	if errors.Is(err, sql.ErrNoRows) {
		return false, tx.Rollback()
	}
	if err != nil {
		_ = tx.Rollback()
		return false, err
	}
	return true, tx.Commit()
}

func (r *rawSQLiteLocker) Lock(ctx context.Context, key string) error {
	r.key = key
	delay := time.Millisecond
	for {
		if ok, err := r.try(ctx); ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

func (r *rawSQLiteLocker) Unlock(ctx context.Context) error {
	tx, err := r.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	res, err := tx.ExecContext(ctx, rawSQLiteRelease, r.key, r.owner)
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		_ = tx.Rollback()
		return fmt.Errorf("raw sqlite lease: not ours (%v)", err)
	}
	return tx.Commit()
}
