package fenceredis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/metajson"
)

var _ fence.Breaker = (*Redlock)(nil)

// sighting is what one server holds for a key: its lock value (the
// acquisition's attempt value, unique to it) and its token counter.
type sighting struct {
	value   string // "" if the lock is absent
	counter int64
}

// Break implements fence.Breaker by the majority rule. It reads every
// server's lock value and counter; the lease is the value a quorum hold,
// and its token the highest counter among them (its acquisition raised a
// quorum's counters to it). If that is token (or token is 0), every
// server drops the lock if it still holds that value: the value belongs
// to one acquisition, so no newer lease can be dropped, whatever happened
// since the read. The lease is broken once a quorum dropped it. Counters
// stay, and every later quorum meets one of the lease's, so the next
// token is greater. A lease in its lock-delay is broken too, lifting the
// delay.
func (r *Redlock) Break(ctx context.Context, key string, token int64) (fence.Holder, error) {
	n := len(r.stores)
	deadline := deadlineOf(ctx, time.Minute)
	seen := gather(ctx, deadline, &r.running, r.stores, func(ctx context.Context, s *Store) (sighting, error) {
		nm := s.names(key)
		vals, err := s.rdb.MGet(ctx, nm.lock, nm.counter).Result()
		if err != nil {
			return sighting{}, fmt.Errorf("fenceredis: break %q: %w", key, err)
		}
		var out sighting
		if v, ok := vals[0].(string); ok {
			out.value = v
		}
		if c, ok := vals[1].(string); ok {
			if out.counter, err = strconv.ParseInt(c, 10, 64); err != nil {
				return sighting{}, fmt.Errorf("fenceredis: break %q: counter %q: %w", key, c, err)
			}
		}
		return out, nil
	}, nil)
	count := make(map[string]int)
	top := make(map[string]int64)
	var errs []error
	for _, o := range seen {
		switch {
		case o.err != nil:
			errs = append(errs, o.err)
		case o.v.value != "":
			count[o.v.value]++
			top[o.v.value] = max(top[o.v.value], o.v.counter)
		}
	}
	value := ""
	for v, c := range count {
		if c >= r.quorum {
			value = v
		}
	}
	if value == "" {
		if len(errs) > n-r.quorum {
			return fence.Holder{}, r.noQuorum("break", key, n-len(errs), errs)
		}
		return fence.Holder{}, fmt.Errorf("%w: %q is not held on a quorum of servers", fence.ErrNotHeld, key)
	}
	owner, meta := splitValue(value)
	h := fence.Holder{Key: key, Owner: owner, Token: top[value]}
	h.Meta = metajson.Decode(meta) // metadata is informational
	if token != 0 && token != h.Token {
		return fence.Holder{}, &fence.HeldError{Key: key, Holder: &h}
	}
	dropped := gather(ctx, deadline, &r.running, r.stores, func(ctx context.Context, s *Store) (bool, error) {
		return s.dropLock(ctx, key, value)
	}, nil)
	yes, _, _, errs := tally(n, dropped, isTrue)
	if yes < r.quorum {
		if len(errs) > 0 {
			return fence.Holder{}, r.noQuorum("break", key, yes, errs)
		}
		return fence.Holder{}, fmt.Errorf("%w: %q: the lease of %s (token %d) ended before the break reached a quorum",
			fence.ErrNotHeld, key, owner, h.Token)
	}
	return h, nil
}
