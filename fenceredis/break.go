package fenceredis

import (
	"context"
	"fmt"
	"strconv"

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
// next token is greater. KEYS: lock, counter. ARGV: token, channel.
// Reply: {1, value, pttl, token} if broken, else heldReply (value false
// if free).
var breakScript = redis.NewScript(heldReply + `
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
redis.call('DEL', KEYS[1])
if redis.REDIS_VERSION_NUM then
  redis.call('SPUBLISH', ARGV[2], 'released')
else
  redis.call('PUBLISH', ARGV[2], 'released')
end
return reply
`)

// resumeScript extends the lock, with a new value (new metadata), if
// its owner is ARGV[1] and its token (the counter) ARGV[5]. KEYS: lock,
// counter. ARGV: owner, new lock value, ttl ms, counter ttl ms, token.
// Reply: 1 if resumed, else heldReply (value false if free).
var resumeScript = redis.NewScript(heldReply + `
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
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return 1
`)

// Break implements fence.Breaker in one script.
func (s *Store) Break(ctx context.Context, key string, token int64) (fence.Holder, error) {
	n := s.names(key)
	reply, err := breakScript.Run(ctx, s.rdb, n.keys(), strconv.FormatInt(token, 10), n.channel).Slice()
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
func (s *Store) Resume(ctx context.Context, req fence.Request, token int64) (fence.Claim, error) {
	if req.Kind != fence.KindLock {
		return nil, fmt.Errorf("fenceredis: resume %q: %w: %s", req.Key, fence.ErrUnsupported, req.Kind)
	}
	c := &claim{s: s, n: s.names(req.Key), key: req.Key, value: lockValue(req.Owner, req.Meta), token: token}
	c.keyArr = [2]string{c.n.lock, c.n.counter}
	c.keys = c.keyArr[:]
	reply, err := resumeScript.Run(ctx, s.rdb, c.keys, req.Owner, c.value, ms(req.TTL), ms(req.TTL+s.retention),
		strconv.FormatInt(token, 10)).Result()
	if err != nil {
		return nil, fmt.Errorf("fenceredis: resume %q: %w", req.Key, err)
	}
	if ok, isInt := reply.(int64); isInt && ok == 1 {
		return c, nil
	}
	vals, _ := reply.([]any)
	h, held, err := parseHolder(req.Key, vals)
	switch {
	case err != nil:
		return nil, fmt.Errorf("fenceredis: resume %q: %w", req.Key, err)
	case !held:
		return nil, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, req.Key)
	}
	return nil, &fence.HeldError{Key: req.Key, Holder: &h}
}
