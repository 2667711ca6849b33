package fenceredis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/tokenrule"
)

// Guard is the resource side of fencing for data kept in Redis: a write
// that carries a fencing token and is applied, in one script, only if the
// token is not lower than the highest token already admitted for the key
// (not higher, in strict mode); the token is recorded with the write. A
// holder that lost its lease while paused and resumes with an old token is
// refused with a *fence.StaleError instead of overwriting the new holder's
// work.
//
// The highest token of key lives in a record key named
// "fence:guard:{T}:" + key, where T makes it hash to key's Redis Cluster
// slot (T is the part of key that Redis hashes, or, if that contains a
// '}', another string of the same slot), so guarded writes work on a
// Cluster whatever the key. Records do not expire: one small string per
// guarded key.
//
// Guard implements fence.Guard: Admit records a token for a resource
// without writing anything, sharing the record with Set and HSet of the
// same key.
type Guard struct {
	rdb     redis.UniversalClient
	prefix  string
	strict  bool
	metrics fence.GuardObserver
}

var _ fence.Guard = (*Guard)(nil)

// GuardOption configures a Guard.
type GuardOption func(*Guard)

// StrictGuard makes the Guard admit only tokens above the highest admitted,
// so each token writes once. The default admits tokens >= the highest, so
// one holder may write many times with its token.
func StrictGuard() GuardOption { return func(g *Guard) { g.strict = true } }

// WithGuardMetrics tells m the Guard's admissions and stale refusals
// (fenceotel.NewGuardMetrics counts them, and adds an event to the
// caller's span on each refusal).
func WithGuardMetrics(m fence.GuardObserver) GuardOption { return func(g *Guard) { g.metrics = m } }

// WithGuardPrefix sets the prefix of the record keys (default
// "fence:guard:"). It must not contain '{' or '}'.
func WithGuardPrefix(prefix string) GuardOption { return func(g *Guard) { g.prefix = prefix } }

// NewGuard returns a Guard for data in the Redis that rdb reaches (single
// server, Sentinel or Cluster).
func NewGuard(rdb redis.UniversalClient, opts ...GuardOption) (*Guard, error) {
	if rdb == nil {
		return nil, errors.New("fenceredis: nil client")
	}
	g := &Guard{rdb: rdb, prefix: DefaultPrefix + "guard:"}
	for _, o := range opts {
		if o != nil {
			o(g)
		}
	}
	if err := checkPrefix(g.prefix); err != nil {
		return nil, err
	}
	return g, nil
}

// guardScript compares the token with the key's record, applies the write
// and records the token. The write comes first: if Redis refuses it (a
// key of the wrong type), the script stops before recording anything.
// Tokens are compared as decimal strings, exactly, for any int64.
// KEYS: record [, data]. ARGV: token, strict ("1"/"0"), op ("", "set",
// "hset"), the op's arguments. Reply: {1 admitted / 0 stale, highest}.
var guardScript = redis.NewScript(`
local function below(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local token, highest = ARGV[1], redis.call('GET', KEYS[1]) or '0'
if below(token, highest) or (ARGV[2] == '1' and token == highest) then
  return {0, highest}
end
if ARGV[3] == 'set' then
  redis.call('SET', KEYS[2], ARGV[4])
elseif ARGV[3] == 'hset' then
  redis.call('HSET', KEYS[2], unpack(ARGV, 4))
end
redis.call('SET', KEYS[1], token)
return {1, highest}
`)

// Admit implements fence.Guard.
func (g *Guard) Admit(ctx context.Context, resource string, token int64) error {
	return g.run(ctx, resource, token, false, "")
}

// Set sets key to value (as the SET command, without expiry) if token is
// admitted for key, recording it; else it returns a *fence.StaleError and
// changes nothing.
func (g *Guard) Set(ctx context.Context, key string, token int64, value any) error {
	return g.run(ctx, key, token, true, "set", value)
}

// HSet sets fields of the hash at key (field, value, field, value, ...; as
// the HSET command) if token is admitted for key, recording it; else it
// returns a *fence.StaleError and changes nothing.
func (g *Guard) HSet(ctx context.Context, key string, token int64, fieldsAndValues ...any) error {
	if len(fieldsAndValues) == 0 || len(fieldsAndValues)%2 != 0 {
		return fmt.Errorf("fenceredis: guarded HSET of %q: want field, value pairs, got %d arguments", key, len(fieldsAndValues))
	}
	return g.run(ctx, key, token, true, "hset", fieldsAndValues...)
}

// Highest returns the highest token admitted for resource, 0 if none.
func (g *Guard) Highest(ctx context.Context, resource string) (int64, error) {
	v, err := g.rdb.Get(ctx, g.record(resource)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("fenceredis: highest token of %q: %w", resource, err)
	}
	return v, nil
}

func (g *Guard) run(ctx context.Context, key string, token int64, write bool, op string, args ...any) error {
	if err := tokenrule.Check(key, token); err != nil {
		return err
	}
	err := g.runOnce(ctx, key, token, write, op, args...)
	fence.ObserveGuard(ctx, g.metrics, key, token, err)
	return err
}

func (g *Guard) runOnce(ctx context.Context, key string, token int64, write bool, op string, args ...any) error {
	keys := []string{g.record(key)}
	if write {
		keys = append(keys, key)
	}
	strict := "0"
	if g.strict {
		strict = "1"
	}
	argv := append([]any{strconv.FormatInt(token, 10), strict, op}, args...)
	reply, err := guardScript.Run(ctx, g.rdb, keys, argv...).Slice()
	if err != nil {
		return fmt.Errorf("fenceredis: guarded write to %q with token %d: %w", key, token, err)
	}
	if len(reply) != 2 {
		return fmt.Errorf("fenceredis: guarded write to %q: unexpected reply %v", key, reply)
	}
	if admitted, _ := reply[0].(int64); admitted == 1 {
		return nil
	}
	highest, _ := toInt(reply[1])
	return &fence.StaleError{Resource: key, Token: token, Highest: highest, Strict: g.strict}
}

// record returns the name of key's record, in key's Cluster slot.
func (g *Guard) record(key string) string {
	return g.prefix + "{" + slotTag(key) + "}:" + key
}
