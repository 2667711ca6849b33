package fenceredis

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
)

// acquireAllScript takes several locks, all or none, and issues each its
// token, as acquireScript (or acquireDelayedScript) would one by one. A
// lock that already holds this attempt's value is a retry's and keeps its
// token. KEYS: lock, counter and until of each key, in order. ARGV: lock
// PX ms (ttl + delay), counter ttl ms, ttl ms, 1 if the leases have a
// lock-delay (then until is set) else 0, then each key's lock value.
// Reply: {1, token...}, or {0, index of the held key (from 1), lock
// value, pttl, token or false}.
var acquireAllScript = redis.NewScript(nowMs + `
local n = #KEYS / 3
local mine = {}
for i = 1, n do
  local value = redis.call('GET', KEYS[3*i-2])
  if value then
    if value ~= ARGV[4+i] then
      return {0, i, value, redis.call('PTTL', KEYS[3*i-2]), redis.call('GET', KEYS[3*i-1]) or false}
    end
    mine[i] = true
  end
end
local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local reply = {1}
for i = 1, n do
  local lock, counter = KEYS[3*i-2], KEYS[3*i-1]
  local token
  if mine[i] then
    token = tonumber(redis.call('GET', counter) or '0')
  else
    redis.call('SET', lock, ARGV[4+i], 'PX', ARGV[1])
    token = math.max(tonumber(redis.call('GET', counter) or '0') + 1, now_us)
    redis.call('SET', counter, string.format('%d', token), 'PX', ARGV[2])
    if ARGV[4] == '1' then
      redis.call('SET', KEYS[3*i], string.format('%d', math.floor(now_us / 1000) + tonumber(ARGV[3])), 'PX', ARGV[1])
    end
  end
  reply[i+1] = token
end
return reply
`)

// TryAcquireAll implements fence.MultiAcquirer with one script over every
// key. On a Redis Cluster the keys of one script must share a slot, and
// each lock key's names have a hash tag of their own: keys in different
// slots are refused with fence.ErrUnsupported, which the Client takes one
// by one instead.
func (s *Store) TryAcquireAll(ctx context.Context, reqs []fence.Request) (_ []fence.Claim, err error) {
	defer markUnavailable(&err)
	if len(reqs) == 0 {
		return nil, nil
	}
	claims := make([]*claim, len(reqs))
	keys := make([]string, 0, 3*len(reqs))
	args := make([]any, 4, 4+len(reqs))
	delay := reqs[0].LockDelay
	for i, req := range reqs {
		if req.Kind != fence.KindLock || req.LockDelay != delay || req.TTL != reqs[0].TTL {
			return nil, fmt.Errorf("%w: TryAcquireAll of requests of different kinds, TTLs or lock-delays", fence.ErrUnsupported)
		}
		c := s.newClaim(req)
		claims[i] = c
		keys = append(keys, c.n.lock, c.n.counter, untilName(c.n.lock))
		args = append(args, c.value)
	}
	if _, cluster := s.rdb.(*redis.ClusterClient); cluster {
		slot := crc16(hashed(keys[0])) % 16384
		for i := 3; i < len(keys); i += 3 {
			if crc16(hashed(keys[i]))%16384 != slot {
				return nil, fmt.Errorf("%w: keys in different Redis Cluster slots, not in one script", fence.ErrUnsupported)
			}
		}
	}
	ttl := reqs[0].TTL
	withDelay := 0
	if delay > 0 {
		withDelay = 1
	}
	args[0], args[1], args[2], args[3] = ms(ttl+delay), ms(ttl+delay+s.retention), ms(ttl), withDelay
	reply, err := acquireAllScript.Run(ctx, s.rdb, keys, args...).Slice()
	if err != nil {
		return nil, fmt.Errorf("fenceredis: acquire all: %w", err)
	}
	if flag, _ := reply[0].(int64); flag != 1 {
		i, _ := reply[1].(int64)
		if len(reply) != 5 || i < 1 || int(i) > len(reqs) {
			return nil, fmt.Errorf("fenceredis: acquire all: unexpected reply %v", reply)
		}
		key := reqs[i-1].Key
		h, _, err := parseHolder(key, append([]any{int64(0)}, reply[2:]...))
		if err != nil {
			return nil, fmt.Errorf("fenceredis: acquire all: %w", err)
		}
		return nil, &fence.HeldError{Key: key, Holder: &h}
	}
	out := make([]fence.Claim, len(claims))
	for i, c := range claims {
		if len(reply) == len(reqs)+1 {
			c.token, err = toInt(reply[i+1])
		}
		if len(reply) != len(reqs)+1 || err != nil || c.token <= 0 {
			// Not all or none: give every key back, then say so.
			for _, c := range claims {
				_ = c.Release(ctx)
			}
			return nil, fmt.Errorf("fenceredis: acquire all: unexpected reply %v", reply)
		}
		out[i] = c
	}
	return out, nil
}
