package fencemem

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/fencing/fence"
)

// A lock's entry outlives its expiry by its lock-delay: until then the
// key is blocked (free finds it, Inspect and List show it, Advance keeps
// it), while Extend and Release of its claim find it no longer held.
// Release of a live lock deletes the entry, delay and all; Delete too.

// SupportsLockDelay implements fence.LockDelayer: the Store keeps the
// lock-delay of locks.
func (s *Store) SupportsLockDelay(k fence.Kind) bool { return k == fence.KindLock }

// blockedUntil is when the key of e is free again unless it is renewed:
// its expiry, plus its lock-delay.
func (e *entry) blockedUntil() time.Time { return e.expires.Add(e.delay) }

// blocking returns the entry that keeps key from being acquired at now, a
// live lock or one in its lock-delay, or nil. Callers hold s.mu.
func (s *Store) blocking(key string, now time.Time) *entry {
	e := s.locks[key]
	if e == nil || !now.Before(e.blockedUntil()) {
		return nil
	}
	return e
}

// free returns nil if the lock req asks for can be granted at now, and
// the *fence.HeldError naming its holder otherwise. Callers hold s.mu.
func (s *Store) free(req fence.Request, now time.Time) error {
	if e := s.blocking(req.Key, now); e != nil {
		h := e.holder(req.Key, now)
		return &fence.HeldError{Key: req.Key, Holder: &h}
	}
	return nil
}

// delayed reports whether the claim's lock expired and is in its
// lock-delay. Callers hold s.mu.
func (s *Store) delayed(c *claim) bool {
	if c.kind != fence.KindLock {
		return false
	}
	e := s.blocking(c.key, s.clock())
	return e != nil && e.owner == c.owner
}

// TryAcquireAll implements fence.MultiAcquirer: under the Store's mutex,
// every lock is granted or none.
func (s *Store) TryAcquireAll(ctx context.Context, reqs []fence.Request) ([]fence.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	for _, req := range reqs {
		if req.Kind != fence.KindLock {
			return nil, fmt.Errorf("%w: %s in TryAcquireAll", fence.ErrUnsupported, req.Kind)
		}
		if err := s.free(req, now); err != nil {
			return nil, err
		}
	}
	claims := make([]fence.Claim, len(reqs))
	for i, req := range reqs {
		e := &entry{owner: req.Owner, expires: now.Add(req.TTL), meta: maps.Clone(req.Meta), delay: req.LockDelay}
		s.locks[req.Key] = e
		claims[i] = s.issue(req, e)
	}
	return claims, nil
}
