package storeurl_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceredis"
	"github.com/fencing/fence/internal/storeurl"
	"github.com/fencing/fence/internal/testserver"
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
