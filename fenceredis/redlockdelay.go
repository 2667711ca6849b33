package fenceredis

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
)

// Lock-delay on Redlock (fence.WithLockDelay). Each server keeps the
// lease as the Store does (lockdelay.go): the lock record with PX TTL +
// delay and the lease's own end, in the server's milliseconds, under
// the until name; extends run the Store's extendDelayedScript on every
// server and need a quorum, as plain extends do.
//
// The majority rule keeps the delay: a lease held by a quorum blocks,
// on each of those servers, until that server's end plus the delay, and
// any later quorum meets at least one of them; with N odd, the key is
// free again the delay after the quorum-th latest end, when fewer than a
// quorum held the lease (for N even, later).
//
// A release must not shorten that. A release that deleted the lease on
// the servers where it is still live, while too few hold it to make a
// quorum, would free those servers before their end plus the delay. So
// Release goes in two phases: first every server where the lease is
// still live ends it there now, keeping the delay (endScript); only if a
// quorum did (the lease was live when released) does the second phase
// delete it everywhere. Otherwise the release is refused (ErrNotHeld)
// and every server stays blocked until its own end plus the delay, each
// end no earlier than when the lease lost its quorum.

// SupportsLockDelay implements fence.LockDelayer: Redlock keeps the
// lock-delay of locks.
func (r *Redlock) SupportsLockDelay(k fence.Kind) bool { return k == fence.KindLock }

var _ fence.LockDelayer = (*Redlock)(nil)

// reserveDelayedScript is reserveScript for a lease with a lock-delay.
// KEYS: lock, counter, until. ARGV: lock value, ttl + delay ms, ttl ms.
// Reply: as reserveScript's.
var reserveDelayedScript = redis.NewScript(heldReply + nextToken + nowMs + `
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local value = redis.call('GET', KEYS[1])
  if value ~= ARGV[1] then
    return held(value)
  end
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
redis.call('SET', KEYS[3], string.format('%d', now_ms() + tonumber(ARGV[3])), 'PX', ARGV[2])
return next_token()
`)

// endScript is the first phase of a delayed release on one server: if
// the lease is still live there, it ends now, and the record stays for
// the delay. KEYS: lock, until. ARGV: lock value, delay ms. Reply: 1,
// or 0 if not live here.
var endScript = redis.NewScript(nowMs + `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local now = now_ms()
if tonumber(redis.call('GET', KEYS[2]) or '0') <= now then
  return 0
end
redis.call('SET', KEYS[2], string.format('%d', now), 'PX', ARGV[2])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// dropScript deletes the lock and its until name if the lock is the
// value, whatever the lease's end, and announces it as releaseScript
// does: the second phase of a delayed release, and the rollback of a
// delayed acquisition that failed (which never was a lease). KEYS: lock,
// until. ARGV: lock value, channel. Reply: 1, or 0 if not held.
var dropScript = redis.NewScript(publish + `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
announce(ARGV[2])
return 1
`)

// reserveDelayed is phase 1 of a delayed acquisition on one server.
func (s *Store) reserveDelayed(ctx context.Context, key, value string, ttl, delay time.Duration) (reservation, error) {
	n := s.names(key)
	reply, err := reserveDelayedScript.Run(ctx, s.rdb, []string{n.lock, n.counter, untilName(n.lock)},
		value, ms(ttl+delay), ms(ttl)).Result()
	if err != nil {
		return reservation{}, fmt.Errorf("fenceredis: reserve %q: %w", key, err)
	}
	token, holder, ok, err := granted(key, reply)
	if err != nil {
		return reservation{}, fmt.Errorf("fenceredis: reserve %q: %w", key, err)
	}
	return reservation{store: s, ok: ok, token: token, holder: holder}, nil
}

// dropLock runs dropScript on one server; false if it did not hold value.
func (s *Store) dropLock(ctx context.Context, key, value string) (bool, error) {
	n := s.names(key)
	ok, err := dropScript.Run(ctx, s.rdb, []string{n.lock, untilName(n.lock)}, value, n.channel).Int()
	if err != nil {
		return false, fmt.Errorf("fenceredis: release %q: %w", key, err)
	}
	return ok == 1, nil
}

// endLease runs endScript on one server; false if the lease is not live there.
func (s *Store) endLease(ctx context.Context, key, value string, delay time.Duration) (bool, error) {
	n := s.names(key)
	ok, err := endScript.Run(ctx, s.rdb, []string{n.lock, untilName(n.lock)}, value, ms(delay)).Int()
	if err != nil {
		return false, fmt.Errorf("fenceredis: release %q: %w", key, err)
	}
	return ok == 1, nil
}

// extendDelayedLock runs the Store's extendDelayedScript on one server;
// false if the lease is not live there.
func (s *Store) extendDelayedLock(ctx context.Context, key, value string, ttl, delay time.Duration) (bool, error) {
	n := s.names(key)
	ok, err := extendDelayedScript.Run(ctx, s.rdb, []string{n.lock, n.counter, untilName(n.lock)},
		value, ms(ttl), ms(ttl+delay), ms(ttl+delay+s.retention)).Int()
	if err != nil {
		return false, fmt.Errorf("fenceredis: extend %q: %w", key, err)
	}
	return ok == 1, nil
}

// releaseDelayed is Release of a lease with a lock-delay, in the two
// phases above.
func (c *redlockClaim) releaseDelayed(ctx context.Context) error {
	r, n := c.r, len(c.r.stores)
	c.abandoned.Store(true)
	deadline := deadlineOf(ctx, time.Minute)
	got := gather(ctx, deadline, &r.running, r.stores, func(ctx context.Context, s *Store) (bool, error) {
		return s.endLease(ctx, c.key, c.value, c.delay)
	}, decided(n, r.quorum, isTrue))
	yes, no, _, errs := tally(n, got, isTrue)
	switch {
	case no > n-r.quorum:
		return fmt.Errorf("%w: %q was live for %s on %d of %d servers, fewer than a quorum of %d; its lock-delay runs",
			fence.ErrNotHeld, c.key, ownerOf(c.value), yes, n, r.quorum)
	case yes < r.quorum:
		return r.noQuorum("release", c.key, yes, errs)
	}
	dropped := gather(ctx, deadline, &r.running, r.stores, func(ctx context.Context, s *Store) (bool, error) {
		return s.dropLock(ctx, c.key, c.value)
	}, decided(n, r.quorum, isTrue))
	if yes, _, _, errs := tally(n, dropped, isTrue); yes < r.quorum {
		return fmt.Errorf("%w (the lease was ended; the key stays blocked for its lock-delay where it was not deleted)",
			r.noQuorum("release", c.key, yes, errs))
	}
	return nil
}
