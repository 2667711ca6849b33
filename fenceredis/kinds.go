package fenceredis

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/metajson"
	"github.com/fencing/fence/internal/kit/rwpref"
)

// Semaphores and reader-writer locks (Store only; Redlock does neither).
// Their names share the lock's hash tag, so every script touches one
// Cluster slot, and none ends in '}', so List never sees them:
//
//	P{E}:sem            sorted set: holder owner -> expiry (server ms)
//	P{E}:sem:info       hash: limit, t:<owner> token, m:<owner> meta
//	P{E}:sem:token      the semaphore's token counter
//	P{E}:rw:readers     sorted set: reader owner -> expiry (server ms)
//	P{E}:rw:writer      string: the writer's owner, with the writer's TTL
//	P{E}:rw:waiting     string: a writer waits; expires unless renewed
//	P{E}:rw:info        hash: t:<owner> token, m:<owner> meta
//	P{E}:rw:token       the reader-writer lock's token counter (one for both)
//	P{E}:released       the release channel, shared with the lock's
//
// Expiry is judged by the server's clock (TIME) inside the scripts: a
// member whose score has passed is no holder, and every acquisition first
// removes such members. The sets and info hashes expire with their last
// member (PEXPIREAT), so a semaphore whose holders all died leaves nothing
// but its counter. Tokens are max(counter+1, server time in µs), as for
// locks.
//
// Writer preference, as rwpref.Decide has it (the scripts below mirror
// it): a writer that finds the key held sets P{E}:rw:waiting for
// rwpref.Intent(TTL), and each of its attempts while it waits sets it
// again; readers are refused while it exists. A writer that stops waiting
// lets it expire; its grant deletes it.

var _ fence.KindSupporter = (*Store)(nil)

// Supports implements fence.KindSupporter: the Store does locks,
// semaphores and reader-writer locks.
func (s *Store) Supports(k fence.Kind) bool { return k <= fence.KindWrite }

type kindNames struct {
	set, info, counter string // semaphore: its set; rw: the readers' set
	writer, waiting    string // rw only
	channel            string
}

func (s *Store) kindNames(key string, k fence.Kind) kindNames {
	n := s.names(key)
	if k == fence.KindSemaphore {
		return kindNames{set: n.lock + ":sem", info: n.lock + ":sem:info", counter: n.lock + ":sem:token", channel: n.channel}
	}
	return kindNames{set: n.lock + ":rw:readers", info: n.lock + ":rw:info", counter: n.lock + ":rw:token",
		writer: n.lock + ":rw:writer", waiting: n.lock + ":rw:waiting", channel: n.channel}
}

// kindLua is shared by the kinds' scripts. KEYS[1] is the holders' set,
// KEYS[2] the info hash, KEYS[3] the counter, and for reader-writer locks
// KEYS[4] the writer, KEYS[5] the waiting marker.
const kindLua = `
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now = math.floor(now_us / 1000)

local function next_token()
  return math.max(tonumber(redis.call('GET', KEYS[3]) or '0') + 1, now_us)
end

-- drop the members of the set whose expiry has passed, and their info
local function reap()
  local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
  for _, o in ipairs(gone) do
    redis.call('HDEL', KEYS[2], 't:' .. o, 'm:' .. o)
  end
  if #gone > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  end
end

-- make the set and the info hash expire with their last holder
local function touch()
  local last = 0
  local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if #top == 2 then
    last = tonumber(top[2])
    redis.call('PEXPIREAT', KEYS[1], string.format('%d', last))
  end
  if KEYS[4] then
    local w = redis.call('PTTL', KEYS[4])
    if w > 0 then last = math.max(last, now + w) end
  end
  if last > now then
    redis.call('PEXPIREAT', KEYS[2], string.format('%d', last))
  else
    redis.call('DEL', KEYS[2])
  end
end

-- holder o with pttl left, as heldReply: its value is the owner id, then
-- the metadata after the separator lockValue uses
local function held_by(o, pttl)
  local v = o
  local m = redis.call('HGET', KEYS[2], 'm:' .. o)
  if m and m ~= '' then v = o .. '\030' .. m end
  return {0, v, pttl, redis.call('HGET', KEYS[2], 't:' .. o) or false}
end

-- the holder in the set whose expiry comes first, as heldReply
local function first_held()
  local f = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
  if #f < 2 then return {0, false, -2, false} end
  return held_by(f[1], math.max(1, tonumber(f[2]) - now))
end

local function grant_member(owner, ttl, counter_ttl, meta)
  local token = string.format('%d', next_token())
  redis.call('SET', KEYS[3], token, 'PX', counter_ttl)
  redis.call('ZADD', KEYS[1], now + tonumber(ttl), owner)
  redis.call('HSET', KEYS[2], 't:' .. owner, token, 'm:' .. owner, meta)
  touch()
  return {1, token}
end
`

// semAcquireScript takes a slot. ARGV: owner, ttl ms, counter ttl ms,
// meta, limit. Reply: {1, token}, {-1, limit held with}, or heldReply for
// the holder whose slot expires first.
var semAcquireScript = redis.NewScript(kindLua + `
reap()
local n = redis.call('ZCARD', KEYS[1])
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {1, redis.call('HGET', KEYS[2], 't:' .. ARGV[1]) or false}
end
if n > 0 then
  local lim = redis.call('HGET', KEYS[2], 'limit')
  if lim and lim ~= ARGV[5] then return {-1, lim} end
end
if n >= tonumber(ARGV[5]) then return first_held() end
redis.call('HSET', KEYS[2], 'limit', ARGV[5])
return grant_member(ARGV[1], ARGV[2], ARGV[3], ARGV[4])
`)

// readAcquireScript takes a read lease unless a writer holds or waits.
// ARGV: owner, ttl ms, counter ttl ms, meta. Reply: {1, token} or
// heldReply (the writer, or the waiting marker's time left).
var readAcquireScript = redis.NewScript(kindLua + `
reap()
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  return {1, redis.call('HGET', KEYS[2], 't:' .. ARGV[1]) or false}
end
local w = redis.call('GET', KEYS[4])
if w then
  return held_by(w, redis.call('PTTL', KEYS[4]))
end
local waits = redis.call('PTTL', KEYS[5])
if waits > 0 then return {0, false, waits, false} end
return grant_member(ARGV[1], ARGV[2], ARGV[3], ARGV[4])
`)

// writeAcquireScript takes the write lease if nobody holds the key, and
// otherwise marks a writer as waiting. ARGV: owner, ttl ms, counter ttl
// ms, meta, marker ttl ms. Reply: {1, token} or heldReply.
var writeAcquireScript = redis.NewScript(kindLua + `
reap()
local w = redis.call('GET', KEYS[4])
if w == ARGV[1] then
  return {1, redis.call('HGET', KEYS[2], 't:' .. w) or false}
end
if w then
  redis.call('SET', KEYS[5], '1', 'PX', ARGV[5])
  return held_by(w, redis.call('PTTL', KEYS[4]))
end
if redis.call('ZCARD', KEYS[1]) > 0 then
  redis.call('SET', KEYS[5], '1', 'PX', ARGV[5])
  return first_held()
end
local token = string.format('%d', next_token())
redis.call('SET', KEYS[3], token, 'PX', ARGV[3])
redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[2])
redis.call('HSET', KEYS[2], 't:' .. ARGV[1], token, 'm:' .. ARGV[1], ARGV[4])
redis.call('DEL', KEYS[5])
touch()
return {1, token}
`)

// memberExtendScript extends a semaphore slot or a read lease. ARGV:
// owner, ttl ms, counter ttl ms. Reply: 1, or 0 if not held.
var memberExtendScript = redis.NewScript(kindLua + `
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s or tonumber(s) <= now then return 0 end
redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
touch()
return 1
`)

// writerExtendScript extends the write lease. ARGV: owner, ttl ms, counter
// ttl ms. Reply: 1, or 0 if not held.
var writerExtendScript = redis.NewScript(kindLua + `
if redis.call('GET', KEYS[4]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[4], ARGV[2])
redis.call('PEXPIRE', KEYS[3], ARGV[3])
touch()
return 1
`)

// memberReleaseScript releases a semaphore slot or a read lease. ARGV:
// owner, channel. Reply: 1, 2 if it had expired (removed all the same),
// or 0 if not held.
var memberReleaseScript = redis.NewScript(kindLua + publish + `
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then return 0 end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], 't:' .. ARGV[1], 'm:' .. ARGV[1])
touch()
announce(ARGV[2])
if tonumber(s) <= now then return 2 end
return 1
`)

// writerReleaseScript releases the write lease. ARGV: owner, channel.
// Reply: 1, or 0 if not held.
var writerReleaseScript = redis.NewScript(kindLua + publish + `
if redis.call('GET', KEYS[4]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[4])
redis.call('HDEL', KEYS[2], 't:' .. ARGV[1], 'm:' .. ARGV[1])
touch()
announce(ARGV[2])
return 1
`)

func (n kindNames) keys() []string {
	if n.writer == "" {
		return []string{n.set, n.info, n.counter}
	}
	return []string{n.set, n.info, n.counter, n.writer, n.waiting}
}

// acquireKind is TryAcquire for semaphores and reader-writer locks: one
// script.
func (s *Store) acquireKind(ctx context.Context, req fence.Request) (fence.Claim, error) {
	n := s.kindNames(req.Key, req.Kind)
	args := []any{req.Owner, ms(req.TTL), ms(req.TTL + s.retention), metajson.Encode(req.Meta)}
	var script *redis.Script
	switch req.Kind {
	case fence.KindSemaphore:
		script, args = semAcquireScript, append(args, req.Limit)
	case fence.KindRead:
		script = readAcquireScript
	default:
		script, args = writeAcquireScript, append(args, ms(rwpref.Intent(req.TTL)))
	}
	reply, err := script.Run(ctx, s.rdb, n.keys(), args...).Result()
	if err != nil {
		return nil, fmt.Errorf("fenceredis: acquire %s %q: %w", req.Kind, req.Key, err)
	}
	if vals, ok := reply.([]any); ok && len(vals) > 0 {
		if flag, _ := vals[0].(int64); flag == -1 && len(vals) == 2 {
			return nil, fmt.Errorf("fenceredis: acquire semaphore %q: %w: held with limit %v, asked with %d", req.Key, fence.ErrLimitMismatch, vals[1], req.Limit)
		}
		if len(vals) == 4 && vals[1] == nil && toPositive(vals[2]) > 0 {
			pttl := toPositive(vals[2])
			// A waiting writer keeps this reader out until its marker
			// expires, unless renewed: wake then.
			return nil, &fence.HeldError{Key: req.Key, Holder: &fence.Holder{Key: req.Key, ExpiresIn: time.Duration(pttl) * time.Millisecond}}
		}
	}
	token, holder, ok, err := granted(req.Key, reply)
	if err != nil {
		return nil, fmt.Errorf("fenceredis: acquire %s %q: %w", req.Kind, req.Key, err)
	}
	if !ok {
		held := &fence.HeldError{Key: req.Key}
		if holder.Owner != "" || holder.ExpiresIn > 0 {
			held.Holder = &holder
		}
		return nil, held
	}
	return &kindClaim{s: s, n: n, kind: req.Kind, key: req.Key, owner: req.Owner, token: token}, nil
}

// kindClaim is a semaphore slot or a side of a reader-writer lock.
type kindClaim struct {
	s     *Store
	n     kindNames
	kind  fence.Kind
	key   string
	owner string
	token int64
}

func (c *kindClaim) Token() int64 { return c.token }

func (c *kindClaim) Extend(ctx context.Context, ttl time.Duration) error {
	script := memberExtendScript
	if c.kind == fence.KindWrite {
		script = writerExtendScript
	}
	ok, err := script.Run(ctx, c.s.rdb, c.n.keys(), c.owner, ms(ttl), ms(ttl+c.s.retention)).Int()
	switch {
	case err != nil:
		return fmt.Errorf("fenceredis: extend %s %q: %w", c.kind, c.key, err)
	case ok != 1:
		return fmt.Errorf("%w: %s %q is no longer held by %s", fence.ErrNotHeld, c.kind, c.key, c.owner)
	}
	return nil
}

func (c *kindClaim) Release(ctx context.Context) error {
	script := memberReleaseScript
	if c.kind == fence.KindWrite {
		script = writerReleaseScript
	}
	ok, err := script.Run(ctx, c.s.rdb, c.n.keys(), c.owner, c.n.channel).Int()
	switch {
	case err != nil:
		return fmt.Errorf("fenceredis: release %s %q: %w", c.kind, c.key, err)
	case ok == 2:
		return fmt.Errorf("%w: %s %q: the lease of %s had expired", fence.ErrNotHeld, c.kind, c.key, c.owner)
	case ok != 1:
		return fmt.Errorf("%w: %s %q is no longer held by %s", fence.ErrNotHeld, c.kind, c.key, c.owner)
	}
	return nil
}

func toPositive(v any) int64 {
	n, _ := v.(int64)
	return max(n, 0)
}
