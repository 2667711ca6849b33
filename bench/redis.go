package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceredis"
)

// TTL is the lease TTL every contender asks for: long enough that no
// renewal or expiry happens inside a measurement.
const TTL = 30 * time.Second

func redisContenders(addr string) []Contender {
	return []Contender{
		{Store: "redis", Name: "fence", Role: RoleFence,
			Desc: "fenceredis: one EVALSHA (SET NX PX of owner and metadata, then TIME, GET and SET PX of the counter) + one EVALSHA (compare-and-DEL, SPUBLISH); waiters wake on pub/sub",
			Open: func(ctx context.Context, rt *atomic.Int64) (Client, error) {
				rdb := newRedis(addr, rt)
				st, err := fenceredis.New(rdb)
				if err != nil {
					rdb.Close()
					return nil, err
				}
				return &fenceClient{c: fence.New(st, fence.WithTTL(TTL)), close: func() error {
					st.Close()
					return rdb.Close()
				}}, nil
			}},
		{Store: "redis", Name: "redsync", Role: RolePeer,
			Desc: "go-redsync/redsync v4 on one server: SET NX PX + compare-and-DEL script, no token; waiters poll every 50-250 ms",
			Open: func(ctx context.Context, rt *atomic.Int64) (Client, error) {
				rdb := newRedis(addr, rt)
				return &redsyncClient{rs: redsync.New(goredis.NewPool(rdb)), rdb: rdb}, nil
			}},
		{Store: "redis", Name: "redislock", Role: RolePeer,
			Desc: "bsm/redislock: one script (SET NX PX) + compare-and-DEL script, no token; waiters retry every 10 ms (LinearBackoff)",
			Open: func(ctx context.Context, rt *atomic.Int64) (Client, error) {
				rdb := newRedis(addr, rt)
				return &redislockClient{c: redislock.New(rdb), rdb: rdb}, nil
			}},
		{Store: "redis", Name: "raw", Role: RoleRaw,
			Desc: "the same job in the fewest calls: one EVALSHA (SET NX PX, then TIME, GET and SET PX of the counter: token max(counter+1, time in µs), counter expiring) + one EVALSHA (compare-and-DEL + PUBLISH); waiters wake on pub/sub",
			Open: func(ctx context.Context, rt *atomic.Int64) (Client, error) {
				return openRawRedis(ctx, addr, rt, rawAcquire)
			}},
		{Store: "redis", Name: "raw-incr", Role: RoleRaw,
			Desc: "a weaker token: one EVALSHA (SET NX PX + INCR; the counter never expires, and a failover that loses it issues old tokens again) + one EVALSHA (compare-and-DEL + PUBLISH); waiters wake on pub/sub",
			Open: func(ctx context.Context, rt *atomic.Int64) (Client, error) {
				return openRawRedis(ctx, addr, rt, rawAcquireIncr)
			}},
	}
}

func openRawRedis(ctx context.Context, addr string, rt *atomic.Int64, acquire *redis.Script) (Client, error) {
	rdb := newRedis(addr, rt)
	for _, s := range []*redis.Script{acquire, rawRelease} {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			rdb.Close()
			return nil, err
		}
	}
	return &rawRedisClient{rdb: rdb, acquire: acquire}, nil
}

func newRedis(addr string, rt *atomic.Int64) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	rdb.AddHook(redisCounter{rt})
	return rdb
}

// redisCounter counts round trips: one per command, one per pipeline.
type redisCounter struct{ n *atomic.Int64 }

func (h redisCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h redisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h redisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// fenceClient is fence on any driver.
type fenceClient struct {
	c     *fence.Client
	close func() error
}

func (f *fenceClient) Locker() Locker { return &fenceLocker{c: f.c} }

func (f *fenceClient) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := f.c.Close(ctx)
	return errors.Join(err, f.close())
}

type fenceLocker struct {
	c *fence.Client
	l *fence.Lease
}

func (f *fenceLocker) Lock(ctx context.Context, key string) error {
	l, err := f.c.Acquire(ctx, key)
	if err != nil {
		return err
	}
	f.l = l
	return nil
}

func (f *fenceLocker) Unlock(ctx context.Context) error {
	l := f.l
	f.l = nil
	return l.Release(ctx)
}

// redsync

type redsyncClient struct {
	rs  *redsync.Redsync
	rdb *redis.Client
}

func (r *redsyncClient) Locker() Locker {
	return &redsyncLocker{rs: r.rs, mutexes: map[string]*redsync.Mutex{}}
}

func (r *redsyncClient) Close() error { return r.rdb.Close() }

// redsyncLocker keeps one Mutex per key, as a program holding a mutex
// per resource would.
type redsyncLocker struct {
	rs      *redsync.Redsync
	mutexes map[string]*redsync.Mutex
	held    *redsync.Mutex
}

func (r *redsyncLocker) Lock(ctx context.Context, key string) error {
	m := r.mutexes[key]
	if m == nil {
		// Tries without limit: the benchmark's context bounds the wait.
		m = r.rs.NewMutex(key, redsync.WithExpiry(TTL), redsync.WithTries(1<<30))
		r.mutexes[key] = m
	}
	if err := m.LockContext(ctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return err
	}
	r.held = m
	return nil
}

func (r *redsyncLocker) Unlock(ctx context.Context) error {
	ok, err := r.held.UnlockContext(ctx)
	if err == nil && !ok {
		err = errors.New("redsync: unlock failed")
	}
	return err
}

// redislock

type redislockClient struct {
	c   *redislock.Client
	rdb *redis.Client
}

func (r *redislockClient) Locker() Locker { return &redislockLocker{c: r.c} }

func (r *redislockClient) Close() error { return r.rdb.Close() }

// redislockOptions retry every 10 ms (the backoff is stateless, so one
// Options serves every call).
var redislockOptions = &redislock.Options{RetryStrategy: redislock.LinearBackoff(10 * time.Millisecond)}

type redislockLocker struct {
	c    *redislock.Client
	lock *redislock.Lock
}

func (r *redislockLocker) Lock(ctx context.Context, key string) error {
	l, err := r.c.Obtain(ctx, key, TTL, redislockOptions)
	if err != nil {
		return err
	}
	r.lock = l
	return nil
}

func (r *redislockLocker) Unlock(ctx context.Context) error {
	l := r.lock
	r.lock = nil
	return l.Release(ctx)
}

// raw: the floor. One script takes the lock and issues the token, one
// deletes it (only if ours) and announces the release.

// rawAcquire issues the token fence issues, max(counter+1, server time in
// µs), so that a counter lost in a failover or expired on purpose never
// lets a token go back, with the fewest calls: the lock, the clock, the
// counter read and written. KEYS lock, counter; ARGV owner, ttl ms,
// counter ttl ms. Reply: token, or 0.
var rawAcquire = redis.NewScript(`
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return 0
end
local t = redis.call('TIME')
local token = math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1, tonumber(t[1]) * 1000000 + tonumber(t[2]))
redis.call('SET', KEYS[2], string.format('%d', token), 'PX', ARGV[3])
return token
`)

// rawAcquireIncr issues an INCR token: cheaper, but its counter lives
// forever and a failover that loses it issues old tokens again. KEYS
// lock, counter; ARGV owner, ttl ms, (unused). Reply: token, or 0.
var rawAcquireIncr = redis.NewScript(`
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return redis.call('INCR', KEYS[2])
end
return 0
`)

// rawRelease: KEYS lock; ARGV owner, channel. Reply: 1, or 0 if not ours.
var rawRelease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '')
  return 1
end
return 0
`)

type rawRedisClient struct {
	rdb     *redis.Client
	acquire *redis.Script
}

func (r *rawRedisClient) Locker() Locker {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &rawRedisLocker{rdb: r.rdb, acquire: r.acquire, id: hex.EncodeToString(b[:]) + "-"}
}

func (r *rawRedisClient) Close() error { return r.rdb.Close() }

type rawRedisLocker struct {
	rdb     *redis.Client
	acquire *redis.Script
	id      string // random, per locker
	n       int64  // acquisitions, to make each owner unique

	key                                string
	lockKeys                           []string // lock, counter
	channel, owner, ttlStr, counterTTL string
	token                              int64

	sub *redis.PubSub // subscribed to channel once contended
}

func (r *rawRedisLocker) setKey(key string) {
	if key == r.key {
		return
	}
	if r.sub != nil {
		_ = r.sub.Close()
		r.sub = nil
	}
	r.key = key
	r.lockKeys = []string{"raw:{" + key + "}", "raw:{" + key + "}:token"}
	r.channel = "raw:{" + key + "}:released"
	r.ttlStr = strconv.FormatInt(TTL.Milliseconds(), 10)
	r.counterTTL = strconv.FormatInt((TTL + time.Hour).Milliseconds(), 10) // fence's default retention
}

func (r *rawRedisLocker) try(ctx context.Context) (bool, error) {
	r.n++
	r.owner = r.id + strconv.FormatInt(r.n, 10)
	tok, err := r.acquire.EvalSha(ctx, r.rdb, r.lockKeys, r.owner, r.ttlStr, r.counterTTL).Int64()
	if err != nil {
		return false, err
	}
	r.token = tok
	return tok > 0, nil
}

func (r *rawRedisLocker) Lock(ctx context.Context, key string) error {
	r.setKey(key)
	ok, err := r.try(ctx)
	if ok || err != nil {
		return err
	}
	if r.sub == nil {
		r.sub = r.rdb.Subscribe(ctx, r.channel)
		if _, err := r.sub.Receive(ctx); err != nil { // the subscription's confirmation
			_ = r.sub.Close()
			r.sub = nil
			return err
		}
	}
	ch := r.sub.Channel()
	timer := time.NewTimer(time.Second)
	defer timer.Stop()
	for {
		if ok, err := r.try(ctx); ok || err != nil {
			return err
		}
		timer.Reset(time.Second) // a lost message costs at most this
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		case <-timer.C:
		}
	}
}

func (r *rawRedisLocker) Unlock(ctx context.Context) error {
	ok, err := rawRelease.EvalSha(ctx, r.rdb, r.lockKeys[:1], r.owner, r.channel).Int()
	if err == nil && ok != 1 {
		err = errors.New("raw redis: lock was not ours")
	}
	return err
}

func (r *rawRedisLocker) close() {
	if r.sub != nil {
		_ = r.sub.Close()
	}
}
