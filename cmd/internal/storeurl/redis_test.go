package storeurl_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
	"github.com/fencing/fence/cmd/internal/storeurl"
	"github.com/fencing/fence/fenceredis"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// openAndLock opens raw, takes a lease on key and returns its token.
func openAndLock(t *testing.T, raw, key string) (fence.Driver, int64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	drv, closer, err := storeurl.Open(ctx, raw)
	if err != nil {
		t.Fatalf("Open(%s): %v", storeurl.Redact(raw), err)
	}
	defer func() {
		if err := closer.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}()
	c := fence.New(drv)
	l, err := c.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("%s: TryAcquire: %v", storeurl.Redact(raw), err)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	return drv, l.Token()
}

func TestOpenRedis(t *testing.T) {
	srv := testserver.Redis(t)
	drv, _ := openAndLock(t, "redis://"+srv.Addr()+"/2?dial_timeout=3s&prefix=app:&token_retention=10m", "k")
	if _, ok := drv.(*fenceredis.Store); !ok {
		t.Errorf("redis:// opened %T", drv)
	}
	// The prefix and database were used.
	_, tok := openAndLock(t, "redis://"+srv.Addr()+"/2?prefix=app:", "k")
	if tok <= 0 {
		t.Errorf("token %d", tok)
	}
}

func TestOpenRedisPassword(t *testing.T) {
	srv := testserver.Redis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	if err := rdb.ConfigSet(context.Background(), "requirepass", "s3cret-pw").Err(); err != nil {
		t.Fatal(err)
	}
	openAndLock(t, "redis://:s3cret-pw@"+srv.Addr(), "k")
	_, _, err := storeurl.Open(context.Background(), "redis://:wrong-pw@"+srv.Addr())
	if err == nil {
		t.Fatal("Open with a wrong password succeeded")
	}
	if strings.Contains(err.Error(), "wrong-pw") {
		t.Errorf("error shows the password: %v", err)
	}
}

func TestOpenRedisCluster(t *testing.T) {
	cl := testserver.RedisCluster(t, 3)
	drv, _ := openAndLock(t, "redis+cluster://"+strings.Join(cl.Addrs(), ","), "k")
	if _, ok := drv.(*fenceredis.Store); !ok {
		t.Errorf("redis+cluster:// opened %T", drv)
	}
}

func TestOpenRedlock(t *testing.T) {
	srvs := testserver.Redises(t, 3)
	addrs := []string{srvs[0].Addr(), srvs[1].Addr(), srvs[2].Addr()}
	drv, _ := openAndLock(t, "redlock://"+strings.Join(addrs, ","), "k")
	if rl, ok := drv.(*fenceredis.Redlock); !ok || rl.Quorum() != 2 {
		t.Errorf("redlock:// opened %T", drv)
	}
	// One server down: a quorum still answers.
	srvs[2].Kill()
	openAndLock(t, "redlock://"+strings.Join(addrs, ","), "k")
	// Two down: no quorum, a clear error.
	srvs[1].Kill()
	_, _, err := storeurl.Open(context.Background(), "redlock://"+strings.Join(addrs, ","))
	if !errors.Is(err, fenceredis.ErrNoQuorum) {
		t.Errorf("Open with 2 of 3 servers down: %v; want ErrNoQuorum", err)
	}
}

func TestOpenRedisBadURLs(t *testing.T) {
	for _, raw := range []string{
		"redis://h1:6379,h2:6379",
		"redis://:pw@localhost:6379?bogus_option=1",
		"redis://localhost:6379/notanumber",
		"redis://localhost:6379?prefix=a{b}",
		"redis://localhost:6379?token_retention=soon",
		"redis+cluster://",
		"redlock://a:1,,b:2",
	} {
		_, _, err := storeurl.Open(context.Background(), raw)
		if !errors.Is(err, storeurl.ErrBadURL) {
			t.Errorf("Open(%q): %v; want ErrBadURL", raw, err)
		}
		if err != nil && strings.Contains(err.Error(), ":pw@") {
			t.Errorf("Open(%q): error shows the password: %v", raw, err)
		}
	}
}

func TestOpenRedisSentinel(t *testing.T) {
	rs := testserver.RedisSentinel(t, 1, 1)
	ctx := context.Background()
	raw := "redis+sentinel://" + strings.Join(rs.SentinelAddrs(), ",") + "/" + rs.MasterName() + "/2?prefix=app:&token_retention=10m"
	drv, _ := openAndLock(t, raw, "k")
	if _, ok := drv.(*fenceredis.Store); !ok {
		t.Errorf("redis+sentinel:// opened %T", drv)
	}
	// The lease was taken on the master, in database 2, under the prefix:
	// its counter is there, with the retention.
	onMaster := redis.NewClient(&redis.Options{Addr: rs.Master().Addr(), DB: 2})
	defer onMaster.Close()
	if pttl, err := onMaster.PTTL(ctx, "app:{k}:token").Result(); err != nil || pttl <= time.Minute || pttl > 11*time.Minute {
		t.Errorf("counter app:{k}:token in database 2 of the master: PTTL %v, %v; want about 10m", pttl, err)
	}
	// ?db= works too, as go-redis's option.
	openAndLock(t, "redis+sentinel://"+rs.SentinelAddrs()[0]+"/"+rs.MasterName()+"?db=3", "k")
	db3 := redis.NewClient(&redis.Options{Addr: rs.Master().Addr(), DB: 3})
	defer db3.Close()
	if n, err := db3.Exists(ctx, "fence:{k}:token").Result(); err != nil || n != 1 {
		t.Errorf("?db=3: counter in database 3 of the master: %d, %v; want 1", n, err)
	}
}

// The user info holds the Redis servers' password, sentinel_password the
// Sentinels'.
func TestOpenRedisSentinelPasswords(t *testing.T) {
	rs := testserver.RedisSentinel(t, 1, 1)
	ctx := context.Background()
	do := func(addr string, args ...any) {
		t.Helper()
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		if err := c.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%s %v: %v", addr, args, err)
		}
	}
	sentinel := rs.SentinelAddrs()[0]
	do(sentinel, "SENTINEL", "SET", rs.MasterName(), "auth-pass", "data-pw")
	for _, n := range rs.Replicas() {
		do(n.Addr(), "CONFIG", "SET", "masterauth", "data-pw")
		do(n.Addr(), "CONFIG", "SET", "requirepass", "data-pw")
	}
	do(rs.Master().Addr(), "CONFIG", "SET", "requirepass", "data-pw")
	do(sentinel, "ACL", "SETUSER", "default", "on", ">sentinel-pw")

	base := "redis+sentinel://" + sentinel + "/" + rs.MasterName()
	with := func(userinfo, query string) string {
		return strings.Replace(base, "//", "//"+userinfo, 1) + query
	}
	openAndLock(t, with(":data-pw@", "?sentinel_password=sentinel-pw"), "k")
	for _, raw := range []string{
		with(":data-pw@", ""),                                // the Sentinel wants its password
		with(":wrong-pw@", "?sentinel_password=sentinel-pw"), // the master refuses
		with(":data-pw@", "?sentinel_password=wrong-pw"),     // the Sentinel refuses
		with("", "?sentinel_password=sentinel-pw"),           // the master wants its password
	} {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, _, err := storeurl.Open(cctx, raw)
		cancel()
		if err == nil {
			t.Errorf("Open(%s) succeeded", storeurl.Redact(raw))
			continue
		}
		t.Logf("Open(%s): %v", storeurl.Redact(raw), err)
		for _, pw := range []string{"data-pw", "wrong-pw", "sentinel-pw"} {
			if strings.Contains(err.Error(), pw) {
				t.Errorf("error shows a password: %v", err)
			}
		}
	}
}

func TestOpenRedisSentinelBadURLs(t *testing.T) {
	for _, raw := range []string{
		"redis+sentinel://s1:26379,s2:26379",
		"redis+sentinel://s1:26379/",
		"redis+sentinel://s1:26379/m/0/extra",
		"redis+sentinel://s1:26379/m/notanumber",
		"redis+sentinel://s1:26379/m?master_name=other",
		"redis+sentinel://s1:26379/m?replica_only=true",
		"redis+sentinel://s1:26379/m?route_by_latency=true",
		"redis+sentinel://s1:26379/m?route_randomly=true",
		"redis+sentinel://:pw@s1:26379/m?password=pw2",
		"redis+sentinel://s1:26379,,s2:26379/m",
		"redis+sentinel:///m",
		"redis+sentinel://s1:26379/m?bogus_option=1&sentinel_password=pw",
	} {
		_, _, err := storeurl.Open(context.Background(), raw)
		if !errors.Is(err, storeurl.ErrBadURL) {
			t.Errorf("Open(%q): %v; want ErrBadURL", raw, err)
		}
		if err != nil && (strings.Contains(err.Error(), ":pw@") || strings.Contains(err.Error(), "=pw")) {
			t.Errorf("Open(%q): error shows the password: %v", raw, err)
		}
	}
}
