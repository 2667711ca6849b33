// Package fencemem is an in-process fence driver, for the unit tests of code
// that uses fence. It keeps leases in a map, issues tokens from a counter
// per key, and wakes waiters through channels.
//
// Its clock can be injected (WithClock) and moved forward (Advance), so a
// test can expire a lease in the store without sleeping; Delete and Expire
// take a lease away behind its holder's back, to test how code reacts to
// loss. For fully virtual time, run the test in a testing/synctest bubble:
// then the Client's renewal and validity timers are virtual too.
//
// A Store lives in one process: it offers no protection across processes.
package fencemem

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/fencing/fence"
)

// Store is an in-memory lock store. The zero value is not usable; call New.
type Store struct {
	now func() time.Time

	mu       sync.Mutex
	offset   time.Duration // added to now by Advance
	locks    map[string]*entry
	tokens   map[string]int64
	watchers map[string]map[chan struct{}]struct{}
}

type entry struct {
	owner   string
	token   int64
	expires time.Time
	meta    map[string]string
}

// Option configures a Store.
type Option func(*Store)

// WithClock makes the Store read time from now instead of time.Now.
func WithClock(now func() time.Time) Option {
	return func(s *Store) { s.now = now }
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{
		now:      time.Now,
		locks:    make(map[string]*entry),
		tokens:   make(map[string]int64),
		watchers: make(map[string]map[chan struct{}]struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

var (
	_ fence.Driver    = (*Store)(nil)
	_ fence.Watcher   = (*Store)(nil)
	_ fence.Inspector = (*Store)(nil)
	_ fence.Lister    = (*Store)(nil)

	_ fence.WaiterCounter = (*Store)(nil)
)

func (s *Store) clock() time.Time { return s.now().Add(s.offset) }

// live returns key's entry if it has not expired. Callers hold s.mu.
func (s *Store) live(key string, now time.Time) *entry {
	e := s.locks[key]
	if e == nil || !now.Before(e.expires) {
		return nil
	}
	return e
}

// TryAcquire implements fence.Driver.
func (s *Store) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	if e := s.live(req.Key, now); e != nil {
		h := e.holder(req.Key, now)
		return nil, &fence.HeldError{Key: req.Key, Holder: &h}
	}
	s.tokens[req.Key]++
	tok := s.tokens[req.Key]
	s.locks[req.Key] = &entry{owner: req.Owner, token: tok, expires: now.Add(req.TTL), meta: maps.Clone(req.Meta)}
	return &claim{s: s, key: req.Key, owner: req.Owner, token: tok}, nil
}

// Inspect implements fence.Inspector.
func (s *Store) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	if err := ctx.Err(); err != nil {
		return fence.Holder{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	e := s.live(key, now)
	if e == nil {
		return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
	}
	return e.holder(key, now), nil
}

// List implements fence.Lister.
func (s *Store) List(ctx context.Context, prefix string) ([]fence.Holder, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	var hs []fence.Holder
	for key := range s.locks {
		if e := s.live(key, now); e != nil && strings.HasPrefix(key, prefix) {
			hs = append(hs, e.holder(key, now))
		}
	}
	slices.SortFunc(hs, func(a, b fence.Holder) int { return cmp.Compare(a.Key, b.Key) })
	return hs, nil
}

// Watch implements fence.Watcher.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	s.mu.Lock()
	if s.watchers[key] == nil {
		s.watchers[key] = make(map[chan struct{}]struct{})
	}
	s.watchers[key][ch] = struct{}{}
	s.mu.Unlock()
	context.AfterFunc(ctx, func() {
		s.mu.Lock()
		delete(s.watchers[key], ch)
		if len(s.watchers[key]) == 0 {
			delete(s.watchers, key)
		}
		s.mu.Unlock()
	})
	return ch, nil
}

// Waiters implements fence.WaiterCounter: the watches open on key, one per
// Acquire waiting for it.
func (s *Store) Waiters(ctx context.Context, key string) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.watchers[key]), nil
}

// notify wakes key's watchers. Callers hold s.mu.
func (s *Store) notify(key string) {
	for ch := range s.watchers[key] {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is already pending
		}
	}
}

// Advance moves the Store's clock forward by d: leases whose TTL runs out
// within d expire in the store, and waiters wake.
func (s *Store) Advance(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.offset += d
	now := s.clock()
	for key, e := range s.locks {
		if !now.Before(e.expires) {
			delete(s.locks, key)
			s.notify(key)
		}
	}
}

// Delete removes key's lease behind its holder's back, as an operator or a
// store failure might. The holder learns at its next renewal. It reports
// whether there was a lease.
func (s *Store) Delete(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.locks[key]
	delete(s.locks, key)
	s.notify(key)
	return ok
}

// Expire makes key's lease expire in the store now, as if its holder had
// stopped renewing. It reports whether there was a live lease.
func (s *Store) Expire(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	e := s.live(key, now)
	if e != nil {
		e.expires = now
		s.notify(key)
	}
	return e != nil
}

func (e *entry) holder(key string, now time.Time) fence.Holder {
	return fence.Holder{Key: key, Owner: e.owner, Token: e.token, ExpiresIn: e.expires.Sub(now), Meta: maps.Clone(e.meta)}
}

type claim struct {
	s     *Store
	key   string
	owner string
	token int64
}

func (c *claim) Token() int64 { return c.token }

func (c *claim) Extend(ctx context.Context, ttl time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	now := c.s.clock()
	e := c.s.live(c.key, now)
	if e == nil || e.owner != c.owner {
		return fmt.Errorf("%w: %q no longer held by %s", fence.ErrNotHeld, c.key, c.owner)
	}
	e.expires = now.Add(ttl)
	return nil
}

func (c *claim) Release(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	e := c.s.locks[c.key]
	if e == nil || e.owner != c.owner {
		return fmt.Errorf("%w: %q no longer held by %s", fence.ErrNotHeld, c.key, c.owner)
	}
	delete(c.s.locks, c.key)
	c.s.notify(c.key)
	if !c.s.clock().Before(e.expires) {
		return fmt.Errorf("%w: %q had expired", fence.ErrNotHeld, c.key)
	}
	return nil
}
