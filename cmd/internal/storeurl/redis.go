package storeurl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
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
//	redis+sentinel://[user:password@]s1:26379,s2:26379/master[/db][?options]  the master Sentinels name
//	rediss+sentinel://...                                    the same, TLS
//
// Options are go-redis's URL options (dial_timeout, read_timeout,
// pool_size, ...) and fence's own: prefix (key prefix, default "fence:")
// and token_retention (a Go duration, default 1h). Host lists take host
// names or IPv4 addresses. Open pings the servers: a single server or a
// Cluster must answer, a quorum of Redlock's (pinged at once), and through
// Sentinel the master, once a Sentinel has named it (see askSentinels).
//
// In a Sentinel URL the hosts are Sentinels (port 26379 if none is given)
// and the path names the master as the Sentinels know it, then optionally
// the database. The user and password are the Redis servers' (as in every
// other Redis URL); the Sentinels' own, if they require one, are the
// sentinel_username and sentinel_password options.
func init() {
	reg := func(name string, open OpenFunc, form string, credentials ...string) {
		register(name, scheme{open: open, forms: []string{form}, credentials: credentials})
	}
	reg("redis", openRedis, "redis://[user:password@]host:6379[/db][?prefix=fence:]")
	reg("rediss", openRedis, "rediss://[user:password@]host:6380[/db] (TLS)")
	reg("redis+cluster", openRedisCluster, "redis+cluster://[user:password@]host1:6379,host2:6379")
	reg("rediss+cluster", openRedisCluster, "rediss+cluster://[user:password@]host1:6380,host2:6380 (TLS)")
	reg("redlock", openRedlock, "redlock://[user:password@]host1:6379,host2:6379,host3:6379")
	reg("redis+sentinel", openRedisSentinel, "redis+sentinel://[user:password@]sentinel1:26379,sentinel2:26379/mastername[/db]",
		"sentinel_password")
	reg("rediss+sentinel", openRedisSentinel, "rediss+sentinel://[user:password@]sentinel1:26379,sentinel2:26379/mastername (TLS)",
		"sentinel_password")
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
	q, _ := url.ParseQuery(u.RawQuery) // Parse has checked it
	var opts []fenceredis.Option
	if p, ok := q["prefix"]; ok {
		if strings.ContainsAny(p[len(p)-1], "{}") {
			return nil, url.URL{}, badURL(u, "prefix %q must not contain '{' or '}'", p[len(p)-1])
		}
		opts = append(opts, fenceredis.WithPrefix(p[len(p)-1]))
		delete(q, "prefix")
	}
	if r, ok := q["token_retention"]; ok {
		d, err := time.ParseDuration(r[len(r)-1])
		if err != nil || d <= 0 {
			return nil, url.URL{}, badURL(u, "token_retention %q is not a positive duration", r[len(r)-1])
		}
		opts = append(opts, fenceredis.WithTokenRetention(d))
		delete(q, "token_retention")
	}
	rest := *u
	rest.Scheme = scheme
	rest.RawQuery = q.Encode()
	return opts, rest, nil
}

// hosts splits a URL's comma-separated host list (Parse has checked that
// each names a host).
func hosts(u *url.URL) []string { return strings.Split(u.Host, ",") }

// goRedisError turns go-redis's complaint about a URL into ErrBadURL,
// without the URL (it may hold a password).
func goRedisError(u *url.URL, err error) error {
	return badURL(u, "%s", strings.TrimPrefix(err.Error(), "redis: "))
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
		return nil, nil, badURL(u, "several hosts: use redis+cluster:// or redlock://")
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
	hs := hosts(u)
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

// sentinelPort is Sentinel's standard port, for hosts given without one.
const sentinelPort = "26379"

func openRedisSentinel(ctx context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
	scheme := strings.TrimSuffix(u.Scheme, "+sentinel")
	fopts, rest, err := redisOptions(u, scheme)
	if err != nil {
		return nil, nil, err
	}
	hs := hosts(u)
	for i, h := range hs {
		if _, _, err := net.SplitHostPort(h); err != nil {
			hs[i] = net.JoinHostPort(h, sentinelPort)
		}
	}
	path := strings.Split(strings.Trim(u.Path, "/"), "/")
	if path[0] == "" || len(path) > 2 {
		return nil, nil, badURL(u, "the path must name the master, as the Sentinels know it (/mastername or /mastername/db)")
	}
	q := rest.Query()
	for _, name := range []string{"master_name", "replica_only", "route_by_latency", "route_randomly"} {
		if q.Has(name) {
			return nil, nil, badURL(u, "option %s is not taken: the path names the master, and every command goes to it", name)
		}
	}
	sentinelUser, sentinelPassword := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	if u.User != nil && (q.Has("username") || q.Has("password")) {
		return nil, nil, badURL(u, "credentials given twice: in the URL's user info and as username/password options")
	}
	q.Set("master_name", path[0])
	for _, h := range hs[1:] {
		q.Add("addr", h)
	}
	// go-redis reads the user info as the Sentinels' credentials; here it is
	// the Redis servers', as in every other Redis URL, so it is set below.
	rest.User = nil
	rest.Host = hs[0]
	rest.Path = ""
	if len(path) == 2 {
		rest.Path = "/" + path[1]
	}
	rest.RawQuery = q.Encode()
	o, err := redis.ParseFailoverURL(rest.String())
	if err != nil {
		return nil, nil, goRedisError(u, err)
	}
	if u.User != nil {
		o.Username = u.User.Username()
		o.Password, _ = u.User.Password()
	}
	o.SentinelUsername, o.SentinelPassword = sentinelUser, sentinelPassword
	if o.TLSConfig != nil {
		// go-redis names the first Sentinel as every server's: with no name
		// set, each connection checks the certificate against its own host.
		o.TLSConfig.ServerName = ""
	}
	o.ContextTimeoutEnabled = true
	master, err := askSentinels(ctx, o)
	if err != nil {
		return nil, nil, err
	}
	d, c, err := openStore(ctx, redis.NewFailoverClient(o), fopts)
	if err != nil {
		// Say which server refused: the master, with the user info's
		// password, not a Sentinel.
		return nil, nil, fmt.Errorf("master %q at %s: %w", o.MasterName, master, err)
	}
	return d, c, nil
}

// askSentinels asks every Sentinel of o at once, one try each, for the
// address of o's master, and returns the first answer. If none answers, it
// returns why, for each: the connection refused, a password refused, no
// master of that name. go-redis's failover client, asked first, would retry
// a refused Sentinel inside every retried dial of the master and wait out
// the context, then say only that the Sentinels are unreachable.
func askSentinels(ctx context.Context, o *redis.FailoverOptions) (string, error) {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the questions still asked once one is answered
	type answer struct {
		addr string
		err  error
	}
	answers := make(chan answer, len(o.SentinelAddrs))
	for _, s := range o.SentinelAddrs {
		wg.Go(func() {
			c := redis.NewSentinelClient(&redis.Options{
				Addr:                  s,
				Username:              o.SentinelUsername,
				Password:              o.SentinelPassword,
				TLSConfig:             o.TLSConfig,
				DialTimeout:           o.DialTimeout,
				ReadTimeout:           o.ReadTimeout,
				WriteTimeout:          o.WriteTimeout,
				ContextTimeoutEnabled: true,
				MaxRetries:            -1, // one try
				DialerRetries:         1,
				PoolSize:              1,
			})
			defer c.Close()
			hp, err := c.GetMasterAddrByName(ctx, o.MasterName).Result()
			switch {
			case errors.Is(err, redis.Nil):
				err = fmt.Errorf("knows no master named %q", o.MasterName)
			case err == nil && len(hp) != 2:
				err = fmt.Errorf("answered %q for the master's address", hp)
			}
			if err != nil {
				answers <- answer{err: fmt.Errorf("Sentinel %s: %w", s, err)}
				return
			}
			answers <- answer{addr: net.JoinHostPort(hp[0], hp[1])}
		})
	}
	var errs []any
	for range o.SentinelAddrs {
		a := <-answers
		if a.err == nil {
			return a.addr, nil
		}
		errs = append(errs, a.err)
	}
	return "", fmt.Errorf("no Sentinel names the master: "+strings.Repeat("; %w", len(errs))[2:], errs...)
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
	hs := hosts(u)
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
	// Every server at once: one that refuses takes go-redis's retries.
	pings := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() { pings[i] = c.Ping(ctx).Err() })
	}
	wg.Wait()
	var up int
	var errs []error
	for i, err := range pings {
		if err != nil {
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
