package fenceredis

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
)

// Lock-delay (fence.WithLockDelay). A lease with a delay keeps its lock
// record for its TTL plus the delay (PX), so that SET NX, whoever tries
// it, fails until the delay after the lease's end; the lease's own end,
// in server milliseconds, is the key's until name (its lock name and
// ":until", in the same slot), set with the record. Extend and release
// refuse once the server's time has passed it: the record then stands
// only for the delay. A release of a live lease deletes both at once, so
// a released key is free at once. Contenders need nothing of this: the
// record is a lock like any other to them, its PTTL the time until the
// key is free.

// SupportsLockDelay implements fence.LockDelayer: Store keeps the
// lock-delay of locks, atomically with the acquisition.
func (s *Store) SupportsLockDelay(k fence.Kind) bool { return k == fence.KindLock }

// untilName is the name of the end of a delayed lease whose lock is lock.
func untilName(lock string) string { return lock + ":until" }

// nowMs is the server's time in milliseconds, for the scripts.
const nowMs = `
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
`

// acquireDelayedScript is acquireScript for a lease with a lock-delay.
// KEYS: lock, counter, until. ARGV: lock value, ttl + delay ms, counter
// ttl ms, ttl ms. Reply: as acquireScript's.
var acquireDelayedScript = redis.NewScript(heldReply + nextToken + nowMs + `
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local value = redis.call('GET', KEYS[1])
  if value == ARGV[1] then
    return tonumber(redis.call('GET', KEYS[2]) or '0')
  end
  return held(value)
end
local token = next_token()
redis.call('SET', KEYS[2], string.format('%d', token), 'PX', ARGV[3])
redis.call('SET', KEYS[3], string.format('%d', now_ms() + tonumber(ARGV[4])), 'PX', ARGV[2])
return token
`)

// extendDelayedScript is compare-and-PEXPIRE for a lease with a
// lock-delay, refused once the lease's end has passed. KEYS: lock,
// counter, until. ARGV: lock value, ttl ms, ttl + delay ms, counter ttl
// ms. Reply: 1, or 0 if not held.
var extendDelayedScript = redis.NewScript(nowMs + `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local now = now_ms()
if tonumber(redis.call('GET', KEYS[3]) or '0') <= now then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
redis.call('SET', KEYS[3], string.format('%d', now + tonumber(ARGV[2])), 'PX', ARGV[3])
return 1
`)

// releaseDelayedScript is releaseScript for a lease with a lock-delay,
// refused once the lease's end has passed (the delay then runs on).
// KEYS: lock, until. ARGV: lock value, channel. Reply: 1, or 0 if not
// held.
var releaseDelayedScript = redis.NewScript(publish + nowMs + `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if tonumber(redis.call('GET', KEYS[2]) or '0') <= now_ms() then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[2])
announce(ARGV[2])
return 1
`)

// acquireDelayed is TryAcquire for a lock with a lock-delay.
func (s *Store) acquireDelayed(ctx context.Context, req fence.Request) (fence.Claim, error) {
	c := s.newClaim(req)
	reply, err := acquireDelayedScript.Run(ctx, s.rdb, []string{c.n.lock, c.n.counter, c.until},
		c.value, ms(req.TTL+req.LockDelay), ms(req.TTL+req.LockDelay+s.retention), ms(req.TTL)).Result()
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

// newClaim returns the claim req would get, before its token: with its
// names, and its until name if req has a lock-delay.
func (s *Store) newClaim(req fence.Request) *claim {
	c := &claim{s: s, n: s.names(req.Key), key: req.Key, value: lockValue(req.Owner, req.Meta), delay: req.LockDelay}
	c.keyArr = [2]string{c.n.lock, c.n.counter}
	c.keys = c.keyArr[:]
	if c.delay > 0 {
		c.until = untilName(c.n.lock)
	}
	return c
}

func (c *claim) releaseDelayed(ctx context.Context) error {
	ok, err := releaseDelayedScript.Run(ctx, c.s.rdb, []string{c.n.lock, c.until}, c.value, c.n.channel).Int()
	switch {
	case err != nil:
		return fmt.Errorf("fenceredis: release %q: %w", c.key, err)
	case ok != 1:
		return fmt.Errorf("%w: %q is no longer held by %s", fence.ErrNotHeld, c.key, ownerOf(c.value))
	}
	return nil
}
