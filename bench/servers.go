package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence/internal/testkit/testserver"
)

// Stores are the stores the benchmark knows, in report order.
var Stores = []string{"redis", "postgres", "etcd", "sqlite", "aztable", "dynamodb"}

// Servers are the private servers the contenders run against.
type Servers struct {
	RedisAddr     string
	PostgresDSN   string
	EtcdEndpoints []string
	// SQLiteDir is the directory of the SQLite contenders' database files.
	SQLiteDir   string
	AztableConn string // an Azure Storage connection string
	DynamoURL   string // dynalite's endpoint
	// Versions are the servers' own version strings, by store.
	Versions map[string]string

	redisAdmin *redis.Client
	pgAdmin    *pgx.Conn
	pgNoStats  bool
}

// StartServers starts a private server for each of stores with
// internal/testkit/testserver; tb is a test, or a testserver.Env in a command.
// The servers end with tb's cleanups.
func StartServers(tb testing.TB, stores []string) *Servers {
	tb.Helper()
	srv := &Servers{Versions: map[string]string{}}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range stores {
		switch s {
		case "redis":
			r := testserver.Redis(tb)
			srv.RedisAddr = r.Addr()
			srv.Versions[s] = "Redis " + redisVersion(ctx, r.Addr())
		case "postgres":
			var opts []testserver.Option
			if hasPgStatStatements(testserver.Require(tb, "postgres")) {
				opts = append(opts, testserver.Args("-c", "shared_preload_libraries=pg_stat_statements"))
			}
			// 128 waiters, each a client of its own, and 64 clients with a
			// lease (and in session mode a connection) each.
			opts = append(opts, testserver.Args("-c", "max_connections=1000"))
			pg := testserver.Postgres(tb, opts...)
			srv.PostgresDSN = pg.DSN()
			srv.Versions[s] = "PostgreSQL " + postgresVersion(ctx, pg.DSN())
			if err := setupPostgres(ctx, pg.DSN()); err != nil {
				tb.Fatalf("bench: postgres setup: %v", err)
			}
		case "etcd":
			e := testserver.Etcd(tb)
			srv.EtcdEndpoints = e.Endpoints()
			srv.Versions[s] = "etcd " + etcdVersion(ctx, e.Endpoints())
		case "sqlite":
			srv.SQLiteDir = tb.TempDir()
			srv.Versions[s] = "SQLite " + sqliteVersion(ctx, srv.SQLiteDir)
		case "aztable":
			az := testserver.AzuriteTable(tb)
			srv.AztableConn = az.ConnectionString()
			srv.Versions[s] = aztableVersion(ctx, az.TableURL())
			if err := setupAztable(ctx, srv.AztableConn); err != nil {
				tb.Fatalf("bench: aztable setup: %v", err)
			}
		case "dynamodb":
			d := testserver.Dynalite(tb)
			srv.DynamoURL = d.Endpoint()
			srv.Versions[s] = "dynalite " + testserver.DynaliteVersion
			if err := setupDynamo(ctx, srv.DynamoURL); err != nil {
				tb.Fatalf("bench: dynamodb setup: %v", err)
			}
		default:
			tb.Fatalf("bench: unknown store %q (known: %s)", s, strings.Join(Stores, ", "))
		}
	}
	return srv
}

// ParseStores checks a comma-separated list of stores.
func ParseStores(list string) ([]string, error) {
	var out []string
	for s := range strings.SplitSeq(list, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !slices.Contains(Stores, s) {
			return nil, fmt.Errorf("unknown store %q (known: %s)", s, strings.Join(Stores, ", "))
		}
		out = append(out, s)
	}
	return out, nil
}

func redisVersion(ctx context.Context, addr string) string {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return "?"
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v
		}
	}
	return "?"
}

func postgresVersion(ctx context.Context, dsn string) string {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return "?"
	}
	defer conn.Close(ctx)
	var v string
	if err := conn.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "?"
	}
	return v
}

func etcdVersion(ctx context.Context, endpoints []string) string {
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: quietLogger()})
	if err != nil {
		return "?"
	}
	defer cli.Close()
	st, err := cli.Status(ctx, endpoints[0])
	if err != nil {
		return "?"
	}
	return st.Version
}

// hasPgStatStatements reports whether the PostgreSQL of the postgres
// program has the pg_stat_statements module, which the benchmark uses to
// measure the server's time per statement.
func hasPgStatStatements(postgres string) bool {
	real, err := filepath.EvalSymlinks(postgres)
	if err != nil {
		return false
	}
	_, err = os.Stat(filepath.Join(filepath.Dir(filepath.Dir(real)), "lib", "pg_stat_statements.so"))
	return err == nil
}

// serverTime returns how long the store's server has spent executing
// requests so far (Redis: INFO commandstats; PostgreSQL:
// pg_stat_statements), or false where it cannot tell (etcd, or no
// pg_stat_statements). The benchmark's own queries for it are left out.
func (srv *Servers) serverTime(ctx context.Context, store string) (time.Duration, bool) {
	if srv == nil {
		return 0, false
	}
	switch store {
	case "redis":
		if srv.redisAdmin == nil {
			srv.redisAdmin = redis.NewClient(&redis.Options{Addr: srv.RedisAddr})
		}
		info, err := srv.redisAdmin.Info(ctx, "commandstats").Result()
		if err != nil {
			return 0, false
		}
		var us int64
		for line := range strings.SplitSeq(info, "\n") {
			name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
				continue
			}
			for f := range strings.SplitSeq(stats, ",") {
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					n, _ := strconv.ParseInt(v, 10, 64)
					us += n
				}
			}
		}
		return time.Duration(us) * time.Microsecond, true
	case "postgres":
		if srv.pgAdmin == nil {
			conn, err := pgx.Connect(ctx, srv.PostgresDSN)
			if err != nil {
				return 0, false
			}
			if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
				conn.Close(ctx)
				srv.pgNoStats = true
			}
			srv.pgAdmin = conn
		}
		if srv.pgNoStats {
			return 0, false
		}
		var ms float64
		err := srv.pgAdmin.QueryRow(ctx, `SELECT coalesce(sum(total_exec_time), 0) FROM pg_stat_statements
			WHERE query NOT LIKE '%pg_stat_statements%'`).Scan(&ms)
		if err != nil {
			return 0, false
		}
		return time.Duration(ms * float64(time.Millisecond)), true
	}
	return 0, false
}

// commands returns how many commands (Redis: INFO commandstats, those a
// script calls included) or statements (PostgreSQL: pg_stat_statements)
// the store's server has run so far, or false where it cannot tell. The
// benchmark's own queries for it are left out.
func (srv *Servers) commands(ctx context.Context, store string) (int64, bool) {
	if srv == nil {
		return 0, false
	}
	if _, ok := srv.serverTime(ctx, store); !ok { // opens the admin connection
		return 0, false
	}
	switch store {
	case "redis":
		info, err := srv.redisAdmin.Info(ctx, "commandstats").Result()
		if err != nil {
			return 0, false
		}
		return commandCalls(info), true
	case "postgres":
		var n int64
		err := srv.pgAdmin.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_statements
			WHERE query NOT LIKE '%pg_stat_statements%'`).Scan(&n)
		return n, err == nil
	}
	return 0, false
}

// commandCalls sums the calls of INFO commandstats, INFO's own left out.
func commandCalls(info string) int64 {
	var n int64
	for line := range strings.SplitSeq(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		for f := range strings.SplitSeq(stats, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				c, _ := strconv.ParseInt(v, 10, 64)
				n += c
			}
		}
	}
	return n
}

// Close closes the connections serverTime opened.
func (srv *Servers) Close() {
	if srv == nil {
		return
	}
	if srv.redisAdmin != nil {
		_ = srv.redisAdmin.Close()
	}
	if srv.pgAdmin != nil {
		_ = srv.pgAdmin.Close(context.Background())
	}
}
