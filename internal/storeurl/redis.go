package storeurl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceredis"
)

// Redis store URLs:
//
//	redis://[user:password@]host:6379[/db][?options]        one server
//	rediss://...                                             one server, TLS
//	redis+cluster://[user:password@]h1:6379,h2:6379[?options]  a Cluster (seed nodes)
//	rediss+cluster://...                                     a Cluster, TLS
//	redlock://[user:password@]h1:6379,h2:6379,h3:6379[/db][?options]  Redlock
//
// Options are go-redis's URL options (dial_timeout, read_timeout,
// pool_size, ...) and fence's own: prefix (key prefix, default "fence:")
// and token_retention (a Go duration, default 1h). Host lists take host
// names or IPv4 addresses. Open pings the servers: a single server or a
// Cluster must answer, and a quorum of Redlock's.
func init() {
	Register("redis", openRedis, "redis://[user:password@]host:6379[/db][?prefix=fence:]")
	Register("rediss", openRedis, "rediss://[user:password@]host:6380[/db] (TLS)")
	Register("redis+cluster", openRedisCluster, "redis+cluster://[user:password@]host1:6379,host2:6379")
	Register("rediss+cluster", openRedisCluster, "rediss+cluster://[user:password@]host1:6380,host2:6380 (TLS)")
	Register("redlock", openRedlock, "redlock://[user:password@]host1:6379,host2:6379,host3:6379")
	// The fence command reports store errors itself; go-redis's own log
	// lines (a line per failed dial) would repeat them on its stderr.
	redis.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// redisOptions takes fence's own parameters out of u's query and returns
// the driver options they give, and the URL that is left for go-redis with
// scheme.
func redisOptions(u *url.URL, scheme string) ([]fenceredis.Option, url.URL, error) {
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return nil, url.URL{}, badURL(u.String(), "malformed parameters: %v", err)
	}
	var opts []fenceredis.Option
	if p, ok := q["prefix"]; ok {
		if strings.ContainsAny(p[len(p)-1], "{}") {
			return nil, url.URL{}, badURL(u.String(), "prefix %q must not contain '{' or '}'", p[len(p)-1])
		}
		opts = append(opts, fenceredis.WithPrefix(p[len(p)-1]))
		delete(q, "prefix")
	}
	if r, ok := q["token_retention"]; ok {
		d, err := time.ParseDuration(r[len(r)-1])
		if err != nil || d <= 0 {
			return nil, url.URL{}, badURL(u.String(), "token_retention %q is not a positive duration", r[len(r)-1])
		}
		opts = append(opts, fenceredis.WithTokenRetention(d))
		delete(q, "token_retention")
	}
	rest := *u
	rest.Scheme = scheme
	rest.RawQuery = q.Encode()
	return opts, rest, nil
}

// hosts splits a URL's comma-separated host list.
func hosts(u *url.URL) ([]string, error) {
	if u.Host == "" {
		return nil, badURL(u.String(), "no host")
	}
	hs := strings.Split(u.Host, ",")
	for _, h := range hs {
		if h == "" {
			return nil, badURL(u.String(), "empty host in the list")
		}
	}
	return hs, nil
}

// goRedisError turns go-redis's complaint about a URL into ErrBadURL,
// without the URL (it may hold a password).
func goRedisError(u *url.URL, err error) error {
	return badURL(u.String(), "%s", strings.TrimPrefix(err.Error(), "redis: "))
}

func openRedis(ctx context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
	tls := u.Scheme == "rediss"
	scheme := "redis"
	if tls {
		scheme = "rediss"
	}
	fopts, rest, err := redisOptions(u, scheme)
	if err != nil {
		return nil, nil, err
	}
	if strings.Contains(rest.Host, ",") {
		return nil, nil, badURL(u.String(), "several hosts: use redis+cluster:// or redlock://")
	}
	o, err := redis.ParseURL(rest.String())
	if err != nil {
		return nil, nil, goRedisError(u, err)
	}
	o.ContextTimeoutEnabled = true
	rdb := redis.NewClient(o)
	return openStore(ctx, rdb, fopts)
}

func openRedisCluster(ctx context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
	scheme := strings.TrimSuffix(u.Scheme, "+cluster")
	fopts, rest, err := redisOptions(u, scheme)
	if err != nil {
		return nil, nil, err
	}
	hs, err := hosts(u)
	if err != nil {
		return nil, nil, err
	}
	// go-redis takes the first node as the host, the others as addr=.
	q := rest.Query()
	for _, h := range hs[1:] {
		q.Add("addr", h)
	}
	rest.Host, rest.RawQuery = hs[0], q.Encode()
	o, err := redis.ParseClusterURL(rest.String())
	if err != nil {
		return nil, nil, goRedisError(u, err)
	}
	o.ContextTimeoutEnabled = true
	rdb := redis.NewClusterClient(o)
	return openStore(ctx, rdb, fopts)
}

func openStore(ctx context.Context, rdb redis.UniversalClient, opts []fenceredis.Option) (fence.Driver, io.Closer, error) {
	s, err := fenceredis.New(rdb, opts...)
	if err == nil {
		err = rdb.Ping(ctx).Err()
	}
	if err != nil {
		rdb.Close()
		return nil, nil, err
	}
	return s, closerFunc(func() error {
		s.Close()
		return rdb.Close()
	}), nil
}

func openRedlock(ctx context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
	fopts, rest, err := redisOptions(u, "redis")
	if err != nil {
		return nil, nil, err
	}
	hs, err := hosts(u)
	if err != nil {
		return nil, nil, err
	}
	var clients []redis.UniversalClient
	closeAll := func() error {
		var errs []error
		for _, c := range clients {
			errs = append(errs, c.Close())
		}
		return errors.Join(errs...)
	}
	for _, h := range hs {
		one := rest
		one.Host = h
		o, err := redis.ParseURL(one.String())
		if err != nil {
			closeAll()
			return nil, nil, goRedisError(u, err)
		}
		o.ContextTimeoutEnabled = true
		clients = append(clients, redis.NewClient(o))
	}
	rl, err := fenceredis.NewRedlock(clients, fopts...)
	if err != nil {
		closeAll()
		return nil, nil, err
	}
	var up int
	var errs []error
	for i, c := range clients {
		if err := c.Ping(ctx).Err(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", hs[i], err))
		} else {
			up++
		}
	}
	if up < rl.Quorum() {
		closeAll()
		return nil, nil, fmt.Errorf("%w: %d of %d servers answer, %d needed: %w",
			fenceredis.ErrNoQuorum, up, len(clients), rl.Quorum(), errors.Join(errs...))
	}
	return rl, closerFunc(func() error {
		rl.Close()
		return closeAll()
	}), nil
}
