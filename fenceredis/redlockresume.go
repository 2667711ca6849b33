package fenceredis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
)

var _ fence.Resumer = (*Redlock)(nil)

// redlockResumeScript is Resume on one server: if the lock's owner (the
// lock value up to its attempt nonce) is ARGV[1] and its token (the
// counter) ARGV[5], and the lease is not in a lock-delay (its until
// name, if any, still ahead: an owner's lease in its delay has expired
// here, whatever its token), it writes the lock again with the same
// attempt and the new metadata ARGV[2], for ARGV[3] ms, plus a
// lock-delay with the lease's end beside it: ARGV[6] ms, or the lease's
// own delay (its PTTL past its end) if longer, so that a resume never
// shortens the delay a lease was given. KEYS: lock, counter, until.
// ARGV: owner, metadata part of the value, ttl ms, counter ttl ms,
// token, delay ms. Reply: {1, new value, delay ms} if resumed, {2} if
// the lease ended here and is in its delay, else heldReply (value false
// if free).
var redlockResumeScript = redis.NewScript(heldReply + nowMs + `
local value = redis.call('GET', KEYS[1])
if not value then
  return held()
end
local attempt = value
local sep = string.find(value, '` + metaSep + `', 1, true)
if sep then
  attempt = string.sub(value, 1, sep - 1)
end
local owner = attempt
sep = string.find(attempt, '` + attemptSep + `', 1, true)
if sep then
  owner = string.sub(attempt, 1, sep - 1)
end
if owner ~= ARGV[1] then
  return held(value)
end
local now = now_ms()
local delay = tonumber(ARGV[6])
local ends = redis.call('GET', KEYS[3])
if ends then
  ends = tonumber(ends)
  if ends <= now then
    return {2}
  end
  delay = math.max(delay, redis.call('PTTL', KEYS[1]) - (ends - now))
end
if redis.call('GET', KEYS[2]) ~= ARGV[5] then
  return held(value)
end
local resumed = attempt .. ARGV[2]
if delay > 0 then
  local px = tonumber(ARGV[3]) + delay
  redis.call('SET', KEYS[1], resumed, 'PX', px)
  redis.call('SET', KEYS[3], string.format('%d', now + tonumber(ARGV[3])), 'PX', px)
else
  redis.call('SET', KEYS[1], resumed, 'PX', ARGV[3])
  redis.call('DEL', KEYS[3])
end
redis.call('PEXPIRE', KEYS[2], tonumber(ARGV[4]) + delay)
return {1, resumed, delay}
`)

// resumed is one server's answer to a resume.
type resumed struct {
	store  *Store
	value  string        // the lock value written, if resumed
	delay  time.Duration // the lock-delay it was written with
	gone   bool          // the key is free, or the lease in its delay
	holder *fence.Holder // another owner or token holds the key
}

func (r resumed) ok() bool { return r.value != "" }

// resumeOn runs redlockResumeScript on one server.
func (s *Store) resumeOn(ctx context.Context, req fence.Request, token int64) (resumed, error) {
	n := s.names(req.Key)
	delay := int64(0)
	if req.LockDelay > 0 {
		delay = ms(req.LockDelay)
	}
	reply, err := redlockResumeScript.Run(ctx, s.rdb, []string{n.lock, n.counter, untilName(n.lock)},
		req.Owner, lockValue("", req.Meta), ms(req.TTL), ms(req.TTL+s.retention),
		strconv.FormatInt(token, 10), delay).Slice()
	if err != nil {
		return resumed{}, fmt.Errorf("fenceredis: resume %q: %w", req.Key, err)
	}
	switch flag, _ := reply[0].(int64); {
	case flag == 1 && len(reply) == 3:
		v, _ := reply[1].(string)
		d, _ := reply[2].(int64)
		return resumed{store: s, value: v, delay: time.Duration(d) * time.Millisecond}, nil
	case flag == 2:
		return resumed{store: s, gone: true}, nil
	}
	h, held, err := parseHolder(req.Key, reply)
	if err != nil {
		return resumed{}, fmt.Errorf("fenceredis: resume %q: %w", req.Key, err)
	}
	if !held {
		return resumed{store: s, gone: true}, nil
	}
	return resumed{store: s, holder: &h}, nil
}

// Resume implements fence.Resumer with Redlock's majority rule: every
// server checks, in one script, that it holds the lease for req.Owner
// with token (and, with a lock-delay, that the lease has not ended
// there) and extends it; the lease is resumed only if a quorum did, with
// one and the same lock value. The servers that extended it when no
// quorum did held the owner's own lease, which no quorum holds: a
// definite refusal gives their extension back as a release would, so
// that it holds nobody off; if servers failed instead, the lease may
// still hold a quorum with them, and their extension stays (it ends with
// the TTL) so that a retry can still take the lease back.
func (r *Redlock) Resume(ctx context.Context, req fence.Request, token int64) (_ fence.Claim, err error) {
	defer markUnavailable(&err)
	if req.Kind != fence.KindLock {
		return nil, fmt.Errorf("fenceredis: resume %q: %w: %s", req.Key, fence.ErrUnsupported, req.Kind)
	}
	start := time.Now()
	deadline := start.Add(req.TTL - drift(req.TTL))
	phaseCtx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	n := len(r.stores)
	// Every server that extends the lease either is on the extended
	// list when the resume is refused, or finds it refused and gives
	// its extension back itself (a call that ends after gather returns).
	var (
		mu       sync.Mutex
		refused  bool
		extended []resumed
	)
	got := gather(phaseCtx, deadline, &r.running, r.stores, func(ctx context.Context, s *Store) (resumed, error) {
		res, err := s.resumeOn(ctx, req, token)
		if err == nil && res.ok() {
			mu.Lock()
			late := refused
			if !late {
				extended = append(extended, res)
			}
			mu.Unlock()
			if late {
				_, _ = s.giveBack(ctx, req.Key, res)
			}
		}
		return res, err
	}, decided(n, r.quorum, resumed.ok))
	yes, no, _, errs := tally(n, got, resumed.ok)
	count := make(map[string]int)
	var value string
	var delay time.Duration
	for _, o := range got {
		if o.err == nil && o.v.ok() {
			if count[o.v.value]++; count[o.v.value] > count[value] {
				value = o.v.value
			}
			delay = max(delay, o.v.delay)
		}
	}
	if count[value] >= r.quorum && time.Since(start) < req.TTL-drift(req.TTL) {
		return &redlockClaim{r: r, key: req.Key, value: value, token: token, abandoned: new(atomic.Bool), delay: delay}, nil
	}
	if no <= n-r.quorum {
		return nil, r.noQuorum("resume", req.Key, yes, append(errs, errors.New("or past the lease's validity")))
	}
	mu.Lock()
	refused = true
	mu.Unlock()
	r.giveBackAll(ctx, req, extended)
	var hs, others []fence.Holder
	var gone int
	for _, o := range got {
		switch {
		case o.err != nil:
		case o.v.holder != nil:
			hs = append(hs, *o.v.holder)
			if o.v.holder.Owner != req.Owner {
				others = append(others, *o.v.holder)
			}
		case o.v.gone:
			gone++
		}
	}
	if len(others) > 0 {
		hs = others // name another owner rather than this one with another token
	}
	// Held for another owner or token on at least as many servers as
	// are free (a free one may not have seen the holder's write yet).
	if len(hs) > 0 && len(hs) >= gone {
		h, _ := combine(req.Key, hs, r.quorum)
		return nil, &fence.HeldError{Key: req.Key, Holder: &h}
	}
	return nil, fmt.Errorf("%w: %q is held for %s with token %d on %d of %d servers, fewer than a quorum of %d",
		fence.ErrNotHeld, req.Key, req.Owner, token, yes, n, r.quorum)
}

// giveBackAll undoes the extensions of a refused resume on the servers
// that made them; see giveBack.
func (r *Redlock) giveBackAll(ctx context.Context, req fence.Request, extended []resumed) {
	if len(extended) == 0 {
		return
	}
	stores := make([]*Store, len(extended))
	written := make(map[*Store]resumed)
	for i, res := range extended {
		stores[i] = res.store
		written[res.store] = res
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), req.TTL)
	defer cancel()
	gather(ctx, time.Now().Add(req.TTL), &r.running, stores, func(ctx context.Context, s *Store) (bool, error) {
		return s.giveBack(ctx, req.Key, written[s])
	}, nil)
}

// giveBack undoes a refused resume's extension on one server: a release,
// or with a lock-delay the first phase of one (the lease ends there now
// and the record stays for the delay), which never frees a server
// sooner than the delay after the lease lost its quorum.
func (s *Store) giveBack(ctx context.Context, key string, res resumed) (bool, error) {
	if res.delay > 0 {
		return s.endLease(ctx, key, res.value, res.delay)
	}
	return notHeldIsFalse(s.release(ctx, key, res.value))
}
