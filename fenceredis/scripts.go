package fenceredis

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/metajson"
)

// The Lua scripts: every store operation is one of them, atomic on the
// server and one round trip. go-redis runs each by EVALSHA and falls back
// to EVAL (which also loads it) when the server answers NOSCRIPT, as after
// a restart or SCRIPT FLUSH.
//
// KEYS are always lock, counter (see keys.go), in one slot. The lock's
// value is the holder's owner id followed by its metadata (lockValue);
// while the lock exists, the counter holds its token (the last one
// issued). Numbers cross the Lua boundary as decimal strings made with
// string.format('%d'), never by Lua's own number formatting; Lua numbers
// are doubles, exact below 2^53 (tokens are microseconds since 1970, about
// 2^50.6 in 2026).
//
// Every redis.call costs the server more than the command itself
// (docs/performance.md), so the scripts make as few as they can: an
// acquisition makes four (SET NX PX, TIME, GET and SET of the counter), a
// release three (GET, DEL, publish).

// heldReply is the tail shared by the scripts that report a holder:
// {0, lock value or false, pttl, token or false}.
const heldReply = `
local function held(value)
  return {0, value or redis.call('GET', KEYS[1]) or false, redis.call('PTTL', KEYS[1]),
    redis.call('GET', KEYS[2]) or false}
end
`

// nextToken is max(counter + 1, server time in microseconds): the counter
// keeps tokens increasing while it exists, the time after it is gone
// (expired, or lost with a restart of a server that keeps nothing).
const nextToken = `
local function next_token()
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  return math.max(tonumber(redis.call('GET', KEYS[2]) or '0') + 1, now)
end
`

// acquireScript takes the lock and issues its token in one step. If the
// lock already holds this value, the request is a retry (go-redis retries
// a command whose reply was lost) and gets the token issued the first time.
// ARGV: lock value, ttl ms, counter ttl ms.
// Reply: the token (an integer: Redis turns a Lua number into one,
// exactly below 2^53) or heldReply.
var acquireScript = newHotScript(heldReply + nextToken + `
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local value = redis.call('GET', KEYS[1])
  if value == ARGV[1] then
    return tonumber(redis.call('GET', KEYS[2]) or '0')
  end
  return held(value)
end
local token = next_token()
redis.call('SET', KEYS[2], string.format('%d', token), 'PX', ARGV[3])
return token
`)

// reserveScript is Redlock's first phase on one server: take the lock and
// propose a token without issuing it. A retry proposes again.
// ARGV: lock value, ttl ms. Reply: the proposed token or heldReply.
var reserveScript = redis.NewScript(heldReply + nextToken + `
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  local value = redis.call('GET', KEYS[1])
  if value ~= ARGV[1] then
    return held(value)
  end
end
return next_token()
`)

// raiseScript is Redlock's second phase on one server: if the lock is
// still this value, raise the counter to the chosen token (which is above
// the counter: this server proposed at most the chosen token, and no one
// else can issue one while the lock is held).
// ARGV: lock value, token, counter ttl ms. Reply: 1, or 0 if not held.
var raiseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
if tonumber(ARGV[2]) > tonumber(redis.call('GET', KEYS[2]) or '0') then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
else
  redis.call('PEXPIRE', KEYS[2], ARGV[3])
end
return 1
`)

// extendScript is compare-and-PEXPIRE. ARGV: lock value, ttl ms, counter
// ttl ms. Reply: 1, or 0 if not held.
var extendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1
`)

// extendAllScript is extendScript for many locks in one call. KEYS: each
// lock followed by its token counter. ARGV: for each lock, in the same
// order, its value, ttl ms and counter ttl ms. Reply: for each lock, 1 if
// extended, 0 if not held, or the error its commands answered (a string);
// one lock's error does not stop the others.
var extendAllScript = newHotScript(`
local out = {}
for i = 1, #KEYS / 2 do
  local lock, counter, a = KEYS[2*i-1], KEYS[2*i], 3*i-2
  local v = redis.pcall('GET', lock)
  if type(v) == 'table' and v.err then
    out[i] = v.err
  elseif v ~= ARGV[a] then
    out[i] = 0
  else
    local e = redis.pcall('PEXPIRE', lock, ARGV[a+1])
    if type(e) == 'table' and e.err then
      out[i] = e.err
    else
      e = redis.pcall('PEXPIRE', counter, ARGV[a+2])
      if type(e) == 'table' and e.err then
        out[i] = e.err
      else
        out[i] = 1
      end
    end
  end
end
return out
`)

// publish defines announce(channel), the release announcement of every
// script that frees a key: sharded pub/sub on Redis 7 and later (the
// only ones with redis.REDIS_VERSION_NUM), plain pub/sub before. The
// waiters' side (watch.go) makes the same choice from the same fact.
const publish = `
local function announce(channel)
  if redis.REDIS_VERSION_NUM then
    redis.call('SPUBLISH', channel, 'released')
  else
    redis.call('PUBLISH', channel, 'released')
  end
end
`

// releaseScript is compare-and-DEL, then a message on the release channel
// (announce). KEYS: the lock alone. ARGV: lock value, channel. Reply: 1,
// or 0 if not held.
var releaseScript = newHotScript(publish + `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('DEL', KEYS[1])
announce(ARGV[2])
return 1
`)

// inspectScript reads the holder. Reply: heldReply; value false if free.
var inspectScript = redis.NewScript(heldReply + `
return held()
`)

// versionScript returns the server's version as a number (70000 for
// 7.0.0), or 0 before Redis 7.
var versionScript = redis.NewScript(`return redis.REDIS_VERSION_NUM or 0`)

// ms is d in whole milliseconds, rounded up: a driver may grant more
// than the TTL asked for, never less. (go-redis sends it in decimal.)
func ms(d time.Duration) int64 {
	return max(1, int64((d+time.Millisecond-1)/time.Millisecond))
}

// granted parses the reply of acquireScript, reserveScript and the kinds'
// acquire scripts: a token, as an integer or as {1, token}, or heldReply,
// for which ok is false and holder is filled in.
func granted(key string, reply any) (token int64, holder fence.Holder, ok bool, err error) {
	if vals, isSlice := reply.([]any); isSlice && len(vals) > 0 {
		if flag, _ := vals[0].(int64); flag != 1 || len(vals) != 2 {
			holder, _, err = parseHolder(key, vals)
			return 0, holder, false, err
		}
		reply = vals[1]
	}
	token, err = toInt(reply)
	if err == nil && token <= 0 {
		err = fmt.Errorf("token %d", token)
	}
	if err != nil {
		return 0, holder, false, fmt.Errorf("fenceredis: bad token in script reply: %v", err)
	}
	return token, holder, true, nil
}

// parseHolder parses heldReply. held is false if the lock is free.
func parseHolder(key string, vals []any) (h fence.Holder, held bool, err error) {
	if len(vals) != 4 {
		return h, false, fmt.Errorf("fenceredis: unexpected holder reply %v", vals)
	}
	h.Key = key
	value, isString := vals[1].(string)
	if !isString {
		return h, false, nil
	}
	var meta string
	h.Owner, meta = splitValue(value)
	if pttl, _ := vals[2].(int64); pttl > 0 {
		h.ExpiresIn = time.Duration(pttl) * time.Millisecond
	}
	if vals[3] != nil {
		h.Token, _ = toInt(vals[3])
	}
	h.Meta = metajson.Decode(meta) // metadata is informational
	return h, true, nil
}

// A lock's value is the owner id, then for a Redlock attempt attemptSep
// and a nonce, then, if the holder has metadata, metaSep and the metadata
// as JSON. Owner ids are printable, so neither separator occurs in one;
// JSON escapes both.
const (
	attemptSep = "\x1f"
	metaSep    = "\x1e"
)

// lockValue is what an acquisition by owner (with a Redlock nonce, if
// any) writes as the lock's value.
func lockValue(owner string, meta map[string]string) string {
	if len(meta) == 0 {
		return owner
	}
	b := make([]byte, 0, len(owner)+len(metaSep)+metajson.Size(meta))
	b = metajson.Append(append(append(b, owner...), metaSep...), meta)
	return unsafe.String(unsafe.SliceData(b), len(b)) // b is never written again
}

// splitValue returns the owner id (without a Redlock nonce) and the
// metadata JSON in a lock value.
func splitValue(value string) (owner, meta string) {
	rest, meta, _ := strings.Cut(value, metaSep)
	owner, _, _ = strings.Cut(rest, attemptSep)
	return owner, meta
}

// ownerOf returns the owner id in a lock value.
func ownerOf(value string) string {
	owner, _ := splitValue(value)
	return owner
}

func toInt(v any) (int64, error) {
	switch v := v.(type) {
	case int64:
		return v, nil
	case string:
		return strconv.ParseInt(v, 10, 64)
	}
	return 0, fmt.Errorf("not an integer: %v (%T)", v, v)
}

// hotScript is a script that a hot path (an acquisition, a release, a
// batch renewal) sends by a command it builds itself. go-redis's Script
// puts the SHA1, every key and every argument of each call in an
// interface of its own and copies them all into a slice of its own; a
// hotScript's SHA1 is boxed once, and its caller appends the keys and
// arguments to the slice that call starts.
type hotScript struct {
	src string
	sha any    // the SHA1 of src, boxed once
	bit uint32 // its bit in a Store's scripts
}

// hotScripts counts the hotScripts made, each given a bit of its own.
var hotScripts int

func newHotScript(src string) *hotScript {
	if hotScripts == 32 {
		panic("fenceredis: more hot scripts than Store.scripts has bits")
	}
	h := &hotScript{src: src, sha: redis.NewScript(src).Hash(), bit: 1 << hotScripts}
	hotScripts++
	return h
}

// call starts the arguments of an EVALSHA of s with nkeys keys, with room
// for n keys and arguments more; append them, keys first.
func (s *hotScript) call(nkeys, n int) []any {
	args := make([]any, 3, 3+n)
	args[0], args[1], args[2] = "evalsha", s.sha, nkeys
	return args
}

// cmd is the command of args, as call started them; as an EVAL of the
// script's source if eval (which also loads it), in a copy of args.
func (s *hotScript) cmd(ctx context.Context, args []any, eval bool) *redis.Cmd {
	if eval {
		args = slices.Clone(args)
		args[0], args[1] = "eval", s.src
	}
	cmd := redis.NewCmd(ctx, args...)
	if args[2] != 0 {
		cmd.SetFirstKeyPos(3)
	}
	return cmd
}

// evalFirst reports whether a call of h should be an EVAL: the Store has
// not yet seen its server run h, so an EVALSHA would most likely come
// back NOSCRIPT and cost a round trip more. loaded marks it seen.
func (s *Store) evalFirst(h *hotScript) bool { return s.scripts.Load()&h.bit == 0 }

// loaded notes that the Store's server ran h (an EVAL loads it): later
// calls send its EVALSHA. On a Cluster each master loads it on its own
// first EVAL; until then an EVALSHA there answers NOSCRIPT and is sent
// again as an EVAL.
func (s *Store) loaded(h *hotScript) {
	s.scripts.Or(h.bit)
}

// runHot sends the EVALSHA of args (an EVAL the first time, evalFirst),
// and if the server lacks the script (NOSCRIPT: a restart, a SCRIPT
// FLUSH) the same as an EVAL, as Script.Run does.
func (s *Store) runHot(ctx context.Context, h *hotScript, args []any) *redis.Cmd {
	eval := s.evalFirst(h)
	cmd := h.cmd(ctx, args, eval)
	_ = s.rdb.Process(ctx, cmd)
	if !eval && noScript(cmd.Err()) {
		eval = true
		cmd = h.cmd(ctx, args, true)
		_ = s.rdb.Process(ctx, cmd)
	}
	if eval && cmd.Err() == nil {
		s.loaded(h)
	}
	return cmd
}

// boxedTTL returns ms(ttl) and ms(ttl + the retention) in interfaces, as
// the acquire and extend scripts take them: made once for the last TTL
// asked, which nearly every call of a Client repeats.
func (s *Store) boxedTTL(ttl time.Duration) *[2]any {
	if b := s.ttlBox.Load(); b != nil && b.ttl == ttl {
		return &b.args
	}
	b := &ttlBox{ttl: ttl, args: [2]any{ms(ttl), ms(ttl + s.retention)}}
	s.ttlBox.Store(b)
	return &b.args
}

type ttlBox struct {
	ttl  time.Duration
	args [2]any
}
