package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence/internal/testserver"
)

// Stores are the stores the benchmark knows, in report order.
var Stores = []string{"redis", "postgres", "etcd"}

// Servers are the private servers the contenders run against.
type Servers struct {
	RedisAddr     string
	PostgresDSN   string
	EtcdEndpoints []string
	// Versions are the servers' own version strings, by store.
	Versions map[string]string
}

// StartServers starts a private server for each of stores with
// internal/testserver; tb is a test, or a testserver.Env in a command.
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
			pg := testserver.Postgres(tb)
			srv.PostgresDSN = pg.DSN()
			srv.Versions[s] = "PostgreSQL " + postgresVersion(ctx, pg.DSN())
			if err := setupPostgres(ctx, pg.DSN()); err != nil {
				tb.Fatalf("bench: postgres setup: %v", err)
			}
		case "etcd":
			e := testserver.Etcd(tb)
			srv.EtcdEndpoints = e.Endpoints()
			srv.Versions[s] = "etcd " + etcdVersion(ctx, e.Endpoints())
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
