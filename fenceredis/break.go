package fenceredis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
)

var (
	_ fence.Breaker = (*Store)(nil)
	_ fence.Resumer = (*Store)(nil)
)

// breakScript deletes the lock if the counter (the lock's token while
// the lock exists) is ARGV[1], or whatever its token for '0', and
// announces the release like releaseScript. The counter stays, so the
// next token is greater. A lease in its lock-delay is broken like a
// live one, its until name with it: the key is free at once. KEYS: lock,
// counter, until. ARGV: token, channel. Reply: {1, value, pttl, token} if
// broken, else heldReply (value false if free).
var breakScript = redis.NewScript(publish + heldReply + `
local value = redis.call('GET', KEYS[1])
if not value then
  return held()
end
local token = redis.call('GET', KEYS[2]) or false
if ARGV[1] ~= '0' and token ~= ARGV[1] then
  return held(value)
end
local reply = held(value)
reply[1] = 1
redis.call('DEL', KEYS[1], KEYS[3])
announce(ARGV[2])
return reply
`)

// resumeScript extends the lock, with a new value (new metadata), if
// its owner is ARGV[1] and its token (the counter) ARGV[5]. A lease with
// a lock-delay keeps it: the script finds the delay as the part of the
// record's PTTL beyond the lease's end (its until name), and writes the
// record and the end again as acquireDelayedScript does; a lease whose
// end has passed stands only for its delay and is not resumed. KEYS:
// lock, counter, until. ARGV: owner, new lock value, ttl ms, counter ttl
// ms, token. Reply: 1 if resumed, {2, delay ms} if resumed with a
// lock-delay, 3 if the lease ended in its lock-delay, else heldReply
// (value false if free).
var resumeScript = redis.NewScript(heldReply + nowMs + `
local value = redis.call('GET', KEYS[1])
if not value then
  return held()
end
local owner = value
local sep = string.find(value, '` + metaSep + `', 1, true)
if sep then
  owner = string.sub(value, 1, sep - 1)
end
if owner ~= ARGV[1] or redis.call('GET', KEYS[2]) ~= ARGV[5] then
  return held(value)
end
local untilv = redis.call('GET', KEYS[3])
if not untilv then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  redis.call('PEXPIRE', KEYS[2], ARGV[4])
  return 1
end
local now = now_ms()
local ends = tonumber(untilv)
if ends <= now then
  return 3
end
local delay = math.max(redis.call('PTTL', KEYS[1]) - (ends - now), 0)
local px = tonumber(ARGV[3]) + delay
redis.call('SET', KEYS[1], ARGV[2], 'PX', px)
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[4]) + delay)
redis.call('SET', KEYS[3], string.format('%d', now + tonumber(ARGV[3])), 'PX', px)
return {2, delay}
`)

// Break implements fence.Breaker in one script.
func (s *Store) Break(ctx context.Context, key string, token int64) (fence.Holder, error) {
	n := s.names(key)
	reply, err := breakScript.Run(ctx, s.rdb, []string{n.lock, n.counter, untilName(n.lock)},
		strconv.FormatInt(token, 10), n.channel).Slice()
	if err != nil {
		return fence.Holder{}, fmt.Errorf("fenceredis: break %q: %w", key, err)
	}
	h, held, err := parseHolder(key, reply)
	switch {
	case err != nil:
		return fence.Holder{}, fmt.Errorf("fenceredis: break %q: %w", key, err)
	case !held:
		return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
	case reply[0] != int64(1):
		return fence.Holder{}, &fence.HeldError{Key: key, Holder: &h}
	}
	return h, nil
}

// Resume implements fence.Resumer in one script.
func (s *Store) Resume(ctx context.Context, req fence.Request, token int64) (_ fence.Claim, err error) {
	defer markUnavailable(&err)
	if req.Kind != fence.KindLock {
		return nil, fmt.Errorf("fenceredis: resume %q: %w: %s", req.Key, fence.ErrUnsupported, req.Kind)
	}
	req.LockDelay = 0 // the lease keeps the delay it has in the store, if any
	c := s.newClaim(req)
	c.token = token
	until := untilName(c.n.lock)
	reply, err := resumeScript.Run(ctx, s.rdb, []string{c.n.lock, c.n.counter, until}, req.Owner, c.value,
		ms(req.TTL), ms(req.TTL+s.retention), strconv.FormatInt(token, 10)).Result()
	if err != nil {
		return nil, fmt.Errorf("fenceredis: resume %q: %w", req.Key, err)
	}
	vals, _ := reply.([]any)
	switch n, _ := reply.(int64); {
	case n == 1:
		return c, nil
	case n == 3:
		return nil, fmt.Errorf("%w: %q: its lease has ended; its lock-delay runs on", fence.ErrNotHeld, req.Key)
	case len(vals) == 2 && vals[0] == int64(2):
		delay, ok := vals[1].(int64)
		if !ok || delay < 0 {
			return nil, fmt.Errorf("fenceredis: resume %q: unexpected reply %v", req.Key, reply)
		}
		// At least 1ms, so the claim stays on the delayed scripts, which
		// keep the until name the store has for it.
		c.delay, c.until = max(time.Duration(delay)*time.Millisecond, time.Millisecond), until
		return c, nil
	}
	h, held, err := parseHolder(req.Key, vals)
	switch {
	case err != nil:
		return nil, fmt.Errorf("fenceredis: resume %q: %w", req.Key, err)
	case !held:
		return nil, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, req.Key)
	}
	return nil, &fence.HeldError{Key: req.Key, Holder: &h}
}
