package fenceredis

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
)

// DefaultTokenRetention is how long a key's token counter outlives the
// lock by default.
const DefaultTokenRetention = time.Hour

// Store is the fence driver for one Redis deployment reached through one
// go-redis client: a single server, a Sentinel-managed primary, or a Redis
// Cluster. It is safe for concurrent use. Close it to stop its release
// subscriptions; it never closes the client it was given.
type Store struct {
	rdb       redis.UniversalClient
	prefix    string
	retention time.Duration
	hub       *hub
	ttlBox    atomic.Pointer[ttlBox] // see boxedTTL
	scripts   atomic.Uint32          // the hotScripts seen run here, a bit each (see evalFirst)
}

var (
	_ fence.Driver    = (*Store)(nil)
	_ fence.Watcher   = (*Store)(nil)
	_ fence.Inspector = (*Store)(nil)
	_ fence.Lister    = (*Store)(nil)

	_ fence.MultiAcquirer = (*Store)(nil)
	_ fence.LockDelayer   = (*Store)(nil)
)

// Option configures a Store or a Redlock.
type Option func(*options)

type options struct {
	prefix    string
	retention time.Duration
}

// WithPrefix sets the prefix of every key and channel name the driver
// uses (default DefaultPrefix, "fence:"). It must not contain '{' or '}'.
// Drivers with different prefixes do not see each other's locks.
func WithPrefix(prefix string) Option {
	return func(o *options) { o.prefix = prefix }
}

// WithTokenRetention sets how long a key's token counter is kept after
// its lock is gone (default DefaultTokenRetention, one hour). Counters
// then expire, so keys used once do not pile up; the next token for such a
// key comes from the server's clock (see the package doc), so tokens keep
// increasing either way. Within the retention they keep increasing even if
// the server's clock steps back.
func WithTokenRetention(d time.Duration) Option {
	return func(o *options) { o.retention = d }
}

func collect(opts []Option) (options, error) {
	o := options{prefix: DefaultPrefix, retention: DefaultTokenRetention}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if err := checkPrefix(o.prefix); err != nil {
		return o, err
	}
	if o.retention <= 0 {
		return o, fmt.Errorf("fenceredis: token retention %v is not positive", o.retention)
	}
	return o, nil
}

// New returns a Store over rdb: a *redis.Client (single server or
// Sentinel failover client) or a *redis.ClusterClient (not a *redis.Ring). Give the client
// ContextTimeoutEnabled, so that renewals give up when the lease's
// validity ends instead of after go-redis's own timeouts.
func New(rdb redis.UniversalClient, opts ...Option) (*Store, error) {
	if rdb == nil {
		return nil, errors.New("fenceredis: nil client")
	}
	if _, ok := rdb.(*redis.Ring); ok {
		return nil, errors.New("fenceredis: redis.Ring is not supported: keys move between its shards, and their locks would not")
	}
	o, err := collect(opts)
	if err != nil {
		return nil, err
	}
	return &Store{rdb: rdb, prefix: o.prefix, retention: o.retention, hub: newHub(rdb)}, nil
}

// Close stops the Store's release subscriptions. It does not close the
// go-redis client. Leases still held stay valid in Redis until their TTL.
func (s *Store) Close() error {
	s.hub.close()
	return nil
}

func (s *Store) names(key string) names { return lockNames(s.prefix, key) }

func (n names) keys() []string { return []string{n.lock, n.counter} }

// TryAcquire implements fence.Driver: one script sets the lock if absent
// and, only then, issues the token max(counter+1, server time in µs).
func (s *Store) TryAcquire(ctx context.Context, req fence.Request) (_ fence.Claim, err error) {
	defer markUnavailable(&err)
	if req.Kind != fence.KindLock {
		return s.acquireKind(ctx, req)
	}
	if req.LockDelay > 0 {
		return s.acquireDelayed(ctx, req)
	}
	// The claim's names and keys are made once, for this attempt and for
	// every later extend and the release.
	c := &claim{s: s, n: s.names(req.Key), key: req.Key, value: lockValue(req.Owner, req.Meta)}
	c.keyArr = [2]string{c.n.lock, c.n.counter}
	c.keys = c.keyArr[:] // in the claim's own allocation
	ttl := s.boxedTTL(req.TTL)
	args := append(acquireScript.call(2, 5), c.n.lock, c.n.counter, c.value, ttl[0], ttl[1])
	reply, err := s.runHot(ctx, acquireScript, args).Result()
	if err != nil {
		return nil, fmt.Errorf("fenceredis: acquire %q: %w", req.Key, err)
	}
	token, holder, ok, err := granted(req.Key, reply)
	if err != nil {
		return nil, fmt.Errorf("fenceredis: acquire %q: %w", req.Key, err)
	}
	if !ok {
		return nil, &fence.HeldError{Key: req.Key, Holder: &holder}
	}
	c.token = token
	return c, nil
}

type claim struct {
	s      *Store
	n      names
	keys   []string // n.keys(), backed by keyArr
	keyArr [2]string
	key    string
	value  string // the lock's value: lockValue(owner, meta)
	token  int64
	delay  time.Duration // the lease's lock-delay; 0: none
	until  string        // with a delay, the name of the lease's end
	boxed  *[3]any       // lock, counter and value as ExtendBatch sends them, made at its first
}

func (c *claim) Token() int64 { return c.token }

// Extend is compare-and-PEXPIRE, as ExtendBatch does it for many.
func (c *claim) Extend(ctx context.Context, ttl time.Duration) error {
	script, keys, args := c.extendCall(ttl)
	return c.extended(script.Run(ctx, c.s.rdb, keys, args...).Int())
}

// Release is compare-and-DEL, announced on the key's release channel.
func (c *claim) Release(ctx context.Context) error {
	if c.delay > 0 {
		return c.releaseDelayed(ctx)
	}
	return c.s.releaseKeys(ctx, c.key, c.keys, c.n.channel, c.value)
}

// extend, release and their Keys forms take the lock value the
// acquisition wrote (lockValue): compare-and-set is against all of it.
func (s *Store) extend(ctx context.Context, key, value string, ttl time.Duration) error {
	return s.extendKeys(ctx, key, s.names(key).keys(), value, ttl)
}

func (s *Store) extendKeys(ctx context.Context, key string, keys []string, value string, ttl time.Duration) error {
	ok, err := extendScript.Run(ctx, s.rdb, keys, value, ms(ttl), ms(ttl+s.retention)).Int()
	switch {
	case err != nil:
		return fmt.Errorf("fenceredis: extend %q: %w", key, err)
	case ok != 1:
		return fmt.Errorf("%w: %q is no longer held by %s", fence.ErrNotHeld, key, ownerOf(value))
	}
	return nil
}

func (s *Store) release(ctx context.Context, key, value string) error {
	n := s.names(key)
	return s.releaseKeys(ctx, key, n.keys(), n.channel, value)
}

func (s *Store) releaseKeys(ctx context.Context, key string, keys []string, channel, value string) error {
	args := append(releaseScript.call(1, 3), keys[0], value, channel)
	ok, err := s.runHot(ctx, releaseScript, args).Int()
	switch {
	case err != nil:
		return fmt.Errorf("fenceredis: release %q: %w", key, err)
	case ok != 1:
		return fmt.Errorf("%w: %q is no longer held by %s", fence.ErrNotHeld, key, ownerOf(value))
	}
	return nil
}

// Inspect implements fence.Inspector.
func (s *Store) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	n := s.names(key)
	reply, err := inspectScript.Run(ctx, s.rdb, n.keys()).Slice()
	if err != nil {
		return fence.Holder{}, fmt.Errorf("fenceredis: inspect %q: %w", key, err)
	}
	h, held, err := parseHolder(key, reply)
	if err != nil {
		return fence.Holder{}, fmt.Errorf("fenceredis: inspect %q: %w", key, err)
	}
	if !held {
		return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
	}
	return h, nil
}

// List implements fence.Lister. It SCANs the whole keyspace (every master
// of a Cluster) for lock names, with a MATCH pattern for the prefix, and
// reads each lock found: O(keys in the database) work on the server, in
// pages of scanCount keys, one round trip per page plus one pipelined
// round trip per page that found locks. Meant for operators and the CLI,
// not for hot paths.
func (s *Store) List(ctx context.Context, prefix string) ([]fence.Holder, error) {
	var (
		mu  sync.Mutex
		all []fence.Holder
	)
	scan := func(ctx context.Context, node redis.Cmdable) error {
		hs, err := s.scanNode(ctx, node, prefix)
		mu.Lock()
		all = append(all, hs...)
		mu.Unlock()
		return err
	}
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error { return scan(ctx, node) })
	} else {
		err = scan(ctx, s.rdb)
	}
	if err != nil {
		return nil, fmt.Errorf("fenceredis: list %q: %w", prefix, err)
	}
	slices.SortFunc(all, func(a, b fence.Holder) int { return cmp.Compare(a.Key, b.Key) })
	return all, nil
}

const scanCount = 1000

func (s *Store) scanNode(ctx context.Context, node redis.Cmdable, prefix string) ([]fence.Holder, error) {
	pattern := lockPattern(s.prefix, prefix)
	var out []fence.Holder
	var cursor uint64
	for {
		found, next, err := node.Scan(ctx, cursor, pattern, scanCount).Result()
		if err != nil {
			return out, err
		}
		var keys []string
		for _, name := range found {
			if key, ok := keyOfLock(s.prefix, name); ok && strings.HasPrefix(key, prefix) {
				keys = append(keys, key)
			}
		}
		if len(keys) > 0 {
			hs, err := s.readHolders(ctx, node, keys)
			if err != nil {
				return out, err
			}
			out = append(out, hs...)
		}
		if next == 0 {
			return out, nil
		}
		cursor = next
	}
}

// readHolders reads the holders of keys in one pipeline (not atomically:
// a lock may go between the reads; such a lock is left out).
func (s *Store) readHolders(ctx context.Context, node redis.Cmdable, keys []string) ([]fence.Holder, error) {
	type reads struct {
		value *redis.StringCmd
		pttl  *redis.DurationCmd
		token *redis.StringCmd
	}
	rs := make([]reads, len(keys))
	_, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, key := range keys {
			n := s.names(key)
			rs[i] = reads{p.Get(ctx, n.lock), p.PTTL(ctx, n.lock), p.Get(ctx, n.counter)}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	var out []fence.Holder
	for i, key := range keys {
		value, err := rs[i].value.Result()
		if err != nil {
			continue // released meanwhile
		}
		var token any
		if t, err := rs[i].token.Result(); err == nil {
			token = t
		}
		h, _, _ := parseHolder(key, []any{int64(0), value, rs[i].pttl.Val().Milliseconds(), token})
		out = append(out, h)
	}
	return out, nil
}

// Watch implements fence.Watcher with the key's release channel; see
// watch.go.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	if err := s.hub.watch(ctx, s.names(key).channel, ch); err != nil {
		return nil, fmt.Errorf("fenceredis: watch %q: %w", key, err)
	}
	return ch, nil
}
