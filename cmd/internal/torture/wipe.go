package torture

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The wipe fault removes the store's own state behind fence's back while
// workers hold and wait for leases: what an operator's cleanup, a
// truncated table or a deleted directory does. The store keeps running.
// Each store's wipe removes what fence keeps there, and says what it
// removed.

// wipeDir removes everything in dir: a file store's lock and token files.
func wipeDir(dir string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return "", err
		}
		for _, e := range entries {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return "", err
			}
		}
		return fmt.Sprintf("removed the %d entries of the store's directory", len(entries)), nil
	}
}

// wipeSQLite deletes every row of every table of the SQLite file.
func wipeSQLite(path string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
		if err != nil {
			return "", err
		}
		defer db.Close()
		return wipeTables(ctx, db, `SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'`, `"%s"`)
	}
}

// wipeMySQL deletes every row of fence's tables in the MariaDB database.
func wipeMySQL(dsn string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		db, err := sql.Open("mysql", dsn)
		if err != nil {
			return "", err
		}
		defer db.Close()
		return wipeTables(ctx, db, `SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE()`, "`%s`")
	}
}

func wipeTables(ctx context.Context, db *sql.DB, list, quote string) (string, error) {
	rows, err := db.QueryContext(ctx, list)
	if err != nil {
		return "", err
	}
	var tables []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			rows.Close()
			return "", err
		}
		tables = append(tables, t)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return "", err
	}
	n := int64(0)
	for _, t := range tables {
		res, err := db.ExecContext(ctx, "DELETE FROM "+fmt.Sprintf(quote, t))
		if err != nil {
			return "", err
		}
		k, _ := res.RowsAffected()
		n += k
	}
	return fmt.Sprintf("deleted the %d rows of tables %s", n, strings.Join(tables, ", ")), nil
}

// wipePostgres deletes every row of fence's tables (fence_*).
func wipePostgres(dsn string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return "", err
		}
		defer conn.Close(context.Background())
		rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE 'fence%'`)
		if err != nil {
			return "", err
		}
		tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return "", err
		}
		n := int64(0)
		for _, t := range tables {
			tag, err := conn.Exec(ctx, "DELETE FROM "+pgx.Identifier{t}.Sanitize())
			if err != nil {
				return "", err
			}
			n += tag.RowsAffected()
		}
		return fmt.Sprintf("deleted the %d rows of tables %s", n, strings.Join(tables, ", ")), nil
	}
}

// wipeRedis runs FLUSHALL on the servers at addrs.
func wipeRedis(addrs ...string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			err := c.FlushAll(ctx).Err()
			c.Close()
			if err != nil {
				return "", err
			}
		}
		return fmt.Sprintf("FLUSHALL on %s", strings.Join(addrs, ", ")), nil
	}
}

// wipeRedisOneOf runs FLUSHALL on one server of addrs per episode, in turn.
func wipeRedisOneOf(addrs ...string) func(context.Context) (string, error) {
	n := 0
	return func(ctx context.Context) (string, error) {
		i := n % len(addrs)
		n++
		return wipeRedis(addrs[i])(ctx)
	}
}

// wipeEtcd deletes every key under fence's prefix.
func wipeEtcd(addrs ...string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		c, err := clientv3.New(clientv3.Config{Endpoints: addrs, DialTimeout: 10 * time.Second})
		if err != nil {
			return "", err
		}
		defer c.Close()
		res, err := c.Delete(ctx, "fence/", clientv3.WithPrefix())
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("deleted the %d keys under fence/", res.Deleted), nil
	}
}

// wipeNATS deletes every JetStream key-value bucket of the servers at
// addrs (one server, or a cluster's).
func wipeNATS(addrs ...string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		js, closeJS, err := natsJetStream("nats://" + strings.Join(addrs, ",nats://"))
		if err != nil {
			return "", err
		}
		defer closeJS()
		var names []string
		l := js.KeyValueStoreNames(ctx)
		for name := range l.Name() {
			names = append(names, name)
		}
		if err := l.Error(); err != nil {
			return "", err
		}
		for _, name := range names {
			if err := js.DeleteKeyValue(ctx, name); err != nil && !errors.Is(err, jetstream.ErrBucketNotFound) {
				return "", err
			}
		}
		return fmt.Sprintf("deleted buckets %s", strings.Join(names, ", ")), nil
	}
}

// natsJetStream connects to the NATS servers at url (comma-separated)
// and returns their JetStream context and what closes the connection.
func natsJetStream(url string) (jetstream.JetStream, func(), error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return js, nc.Close, nil
}
