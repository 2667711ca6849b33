// Package fencemem is an in-process fence driver, for the unit tests of code
// that uses fence. It keeps leases in maps, issues tokens from a counter
// per key, and wakes waiters through channels. It supports locks,
// semaphores and reader-writer locks (writer-preferring: a writer that
// finds the key held keeps new readers out for its TTL, at least two
// seconds, renewed by each of its attempts while it waits).
//
// Its clock can be injected (WithClock) and moved forward (Advance), so a
// test can expire a lease in the store without sleeping; Delete and Expire
// take a lease away behind its holder's back, to test how code reacts to
// loss. Break and Resume implement fence.Breaker and fence.Resumer. For fully virtual time, run the test in a testing/synctest bubble:
// then the Client's renewal and validity timers are virtual too.
//
// It takes several locks at once under its mutex (fence.MultiAcquirer),
// extends many claims in one call (fence.BatchExtender), and keeps lock-delays (fence.LockDelayer): an expired lock with a delay
// blocks its key until its expiry plus the delay (see lockdelay.go);
// Delete removes a lock, delay and all.
//
// A Store lives in one process: it offers no protection across processes.
// Its tokens start at 1 for each key, so that tests can expect them; a new
// Store (a restarted process) starts again at 1, unlike every other store,
// whose tokens never go back. Protect a resource that outlives the process
// with fencefile or a server store.
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
	"github.com/fencing/fence/internal/kit/rwpref"
)

// Store is an in-memory lock store. The zero value is not usable; call New.
type Store struct {
	now func() time.Time

	mu       sync.Mutex
	offset   time.Duration // added to now by Advance
	locks    map[string]*entry
	sems     map[string]*semaphore
	rws      map[string]*rwlock
	tokens   map[space]int64
	watchers map[string]map[chan struct{}]struct{}
}

// space is a key in one kind's namespace: locks, semaphores and
// reader-writer locks on the same key are independent.
type space struct {
	kind fence.Kind // KindLock, KindSemaphore, or KindWrite for both sides of an RW lock
	key  string
}

type semaphore struct {
	limit   int
	holders map[string]*entry // by owner
}

type rwlock struct {
	readers map[string]*entry // by owner
	writer  *entry
	// writerWaits keeps new readers out until then: a writer that found the
	// key held sets it rwpref.Intent ahead, and every later attempt of a
	// waiting writer pushes it on. A writer that stops waiting lets it lapse.
	writerWaits time.Time
}

type entry struct {
	owner   string
	token   int64
	expires time.Time
	meta    map[string]string
	delay   time.Duration // the lock's Request.LockDelay; see lockdelay.go
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
		sems:     make(map[string]*semaphore),
		rws:      make(map[string]*rwlock),
		tokens:   make(map[space]int64),
		watchers: make(map[string]map[chan struct{}]struct{}),
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

var (
	_ fence.Driver        = (*Store)(nil)
	_ fence.Watcher       = (*Store)(nil)
	_ fence.Inspector     = (*Store)(nil)
	_ fence.Lister        = (*Store)(nil)
	_ fence.KindSupporter = (*Store)(nil)
	_ fence.WaiterCounter = (*Store)(nil)
	_ fence.MultiAcquirer = (*Store)(nil)
	_ fence.LockDelayer   = (*Store)(nil)
	_ fence.Breaker       = (*Store)(nil)
	_ fence.Resumer       = (*Store)(nil)
	_ fence.BatchExtender = (*Store)(nil)
)

// Supports implements fence.KindSupporter: the Store does locks,
// semaphores and reader-writer locks.
func (s *Store) Supports(k fence.Kind) bool { return k <= fence.KindWrite }

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
	e := &entry{owner: req.Owner, expires: now.Add(req.TTL), meta: maps.Clone(req.Meta)}
	switch req.Kind {
	case fence.KindLock:
		if err := s.free(req, now); err != nil {
			return nil, err
		}
		e.delay = req.LockDelay
		s.locks[req.Key] = e
	case fence.KindSemaphore:
		sem := s.semaphore(req.Key, now)
		if len(sem.holders) > 0 && sem.limit != req.Limit {
			return nil, fmt.Errorf("%w: %q is held with limit %d, asked with %d", fence.ErrLimitMismatch, req.Key, sem.limit, req.Limit)
		}
		if len(sem.holders) >= req.Limit {
			return nil, &fence.HeldError{Key: req.Key}
		}
		sem.limit = req.Limit
		sem.holders[req.Owner] = e
	case fence.KindRead, fence.KindWrite:
		rw := s.rwlock(req.Key, now)
		write := req.Kind == fence.KindWrite
		step := rwpref.Decide(write, rwpref.Lock{Readers: len(rw.readers) > 0, Writer: rw.writer != nil, WriterWaits: now.Before(rw.writerWaits)})
		if step == rwpref.Intend {
			rw.writerWaits = now.Add(rwpref.Intent(req.TTL))
		}
		if step != rwpref.Grant {
			held := &fence.HeldError{Key: req.Key}
			if rw.writer != nil {
				h := rw.writer.holder(req.Key, now)
				held.Holder = &h
			}
			return nil, held
		}
		if write {
			rw.writer = e
			rw.writerWaits = time.Time{}
		} else {
			rw.readers[req.Owner] = e
		}
	default:
		return nil, fmt.Errorf("%w: %s", fence.ErrUnsupported, req.Kind)
	}
	return s.issue(req, e), nil
}

// issue gives e, just granted for req, the key's next token. Callers hold
// s.mu.
func (s *Store) issue(req fence.Request, e *entry) *claim {
	sp := spaceOf(req.Kind, req.Key)
	s.tokens[sp]++
	e.token = s.tokens[sp]
	return &claim{s: s, key: req.Key, kind: req.Kind, owner: req.Owner, token: e.token}
}

func spaceOf(k fence.Kind, key string) space {
	if k == fence.KindRead {
		k = fence.KindWrite // readers and writers share one token sequence
	}
	return space{kind: k, key: key}
}

// semaphore returns key's semaphore with its expired holders removed.
// Callers hold s.mu.
func (s *Store) semaphore(key string, now time.Time) *semaphore {
	sem := s.sems[key]
	if sem == nil {
		sem = &semaphore{holders: make(map[string]*entry)}
		s.sems[key] = sem
	}
	maps.DeleteFunc(sem.holders, func(_ string, e *entry) bool { return !now.Before(e.expires) })
	return sem
}

// rwlock returns key's reader-writer lock with its expired holders
// removed. Callers hold s.mu.
func (s *Store) rwlock(key string, now time.Time) *rwlock {
	rw := s.rws[key]
	if rw == nil {
		rw = &rwlock{readers: make(map[string]*entry)}
		s.rws[key] = rw
	}
	maps.DeleteFunc(rw.readers, func(_ string, e *entry) bool { return !now.Before(e.expires) })
	if rw.writer != nil && !now.Before(rw.writer.expires) {
		rw.writer = nil
	}
	return rw
}

// held returns the live entry of the claim's owner, or nil. Callers hold
// s.mu.
func (s *Store) held(c *claim, now time.Time) *entry {
	var e *entry
	switch c.kind {
	case fence.KindLock:
		e = s.live(c.key, now)
	case fence.KindSemaphore:
		e = s.semaphore(c.key, now).holders[c.owner]
	case fence.KindRead:
		e = s.rwlock(c.key, now).readers[c.owner]
	case fence.KindWrite:
		e = s.rwlock(c.key, now).writer
	}
	if e == nil || e.owner != c.owner || !now.Before(e.expires) {
		return nil
	}
	return e
}

// drop removes the claim's entry, live or expired, if it is still the
// claim's. Callers hold s.mu.
func (s *Store) drop(c *claim) bool {
	switch c.kind {
	case fence.KindLock:
		if e := s.locks[c.key]; e != nil && e.owner == c.owner {
			delete(s.locks, c.key)
			return true
		}
	case fence.KindSemaphore:
		if sem := s.sems[c.key]; sem != nil && sem.holders[c.owner] != nil {
			delete(sem.holders, c.owner)
			if len(sem.holders) == 0 {
				delete(s.sems, c.key)
			}
			return true
		}
	case fence.KindRead, fence.KindWrite:
		rw := s.rws[c.key]
		if rw == nil {
			return false
		}
		found := false
		if c.kind == fence.KindRead && rw.readers[c.owner] != nil {
			delete(rw.readers, c.owner)
			found = true
		}
		if c.kind == fence.KindWrite && rw.writer != nil && rw.writer.owner == c.owner {
			rw.writer = nil
			found = true
		}
		if len(rw.readers) == 0 && rw.writer == nil && !s.clock().Before(rw.writerWaits) {
			delete(s.rws, c.key)
		}
		return found
	}
	return false
}

// Inspect implements fence.Inspector.
func (s *Store) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	if err := ctx.Err(); err != nil {
		return fence.Holder{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	e := s.blocking(key, now)
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
		if e := s.blocking(key, now); e != nil && strings.HasPrefix(key, prefix) {
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
		if !now.Before(e.blockedUntil()) {
			delete(s.locks, key)
			s.notify(key)
		}
	}
	for key, sem := range s.sems {
		if n := len(sem.holders); len(s.semaphore(key, now).holders) < n {
			s.notify(key)
		}
	}
	for key, rw := range s.rws {
		n, w := len(rw.readers), rw.writer
		if rw = s.rwlock(key, now); len(rw.readers) < n || rw.writer != w {
			s.notify(key)
		}
	}
}

// Break implements fence.Breaker: it deletes key's lock if its token is
// token (any, for 0). The key's token counter stays.
func (s *Store) Break(ctx context.Context, key string, token int64) (fence.Holder, error) {
	if err := ctx.Err(); err != nil {
		return fence.Holder{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	e := s.blocking(key, now) // a live lease, or one in its lock-delay
	if e == nil {
		return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
	}
	h := e.holder(key, now)
	if token != 0 && e.token != token {
		return fence.Holder{}, &fence.HeldError{Key: key, Holder: &h}
	}
	delete(s.locks, key)
	s.notify(key)
	return h, nil
}

// Resume implements fence.Resumer: it extends key's lock for req.Owner if
// its owner and token are theirs.
func (s *Store) Resume(ctx context.Context, req fence.Request, token int64) (fence.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if req.Kind != fence.KindLock {
		return nil, fmt.Errorf("%w: resume of a %s", fence.ErrUnsupported, req.Kind)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	e := s.live(req.Key, now)
	if e == nil {
		return nil, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, req.Key)
	}
	if e.owner != req.Owner || e.token != token {
		h := e.holder(req.Key, now)
		return nil, &fence.HeldError{Key: req.Key, Holder: &h}
	}
	e.expires = now.Add(req.TTL)
	e.meta = maps.Clone(req.Meta)
	return &claim{s: s, key: req.Key, kind: fence.KindLock, owner: req.Owner, token: token}, nil
}

// Delete removes key's lease behind its holder's back, as an operator or a
// store failure might. The holder learns at its next renewal, or at its
// release if that comes first (Release then returns a *fence.LostError).
// It reports whether there was a lease.
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
	return fence.Holder{Key: key, Owner: e.owner, Token: e.token, ExpiresIn: e.blockedUntil().Sub(now), Meta: maps.Clone(e.meta)}
}

type claim struct {
	s     *Store
	key   string
	kind  fence.Kind
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
	return c.s.extend(c, ttl, c.s.clock())
}

// extend is compare-and-extend of c at now. Callers hold s.mu.
func (s *Store) extend(c *claim, ttl time.Duration, now time.Time) error {
	e := s.held(c, now)
	if e == nil {
		return fmt.Errorf("%w: %s %q no longer held by %s", fence.ErrNotHeld, c.kind, c.key, c.owner)
	}
	e.expires = now.Add(ttl)
	return nil
}

// Batchable implements fence.BatchExtender: every claim of this Store,
// of every kind.
func (s *Store) Batchable(c fence.Claim) bool {
	mc, ok := c.(*claim)
	return ok && mc.s == s
}

// ExtendBatch implements fence.BatchExtender: each claim is extended as
// its Extend would, one after the other under the Store's mutex.
func (s *Store) ExtendBatch(ctx context.Context, claims []fence.Claim, ttls []time.Duration) []error {
	errs := make([]error, len(claims))
	if err := ctx.Err(); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock()
	for i, c := range claims {
		mc, ok := c.(*claim)
		if !ok || mc.s != s {
			errs[i] = fmt.Errorf("fencemem: ExtendBatch of a claim of another driver (%T)", c)
			continue
		}
		errs[i] = s.extend(mc, ttls[i], now)
	}
	return errs
}

func (c *claim) Release(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	live := c.s.held(c, c.s.clock()) != nil
	if !live && c.s.delayed(c) {
		return fmt.Errorf("%w: %s %q had expired; its lock-delay runs", fence.ErrNotHeld, c.kind, c.key)
	}
	if !c.s.drop(c) {
		return fmt.Errorf("%w: %s %q no longer held by %s", fence.ErrNotHeld, c.kind, c.key, c.owner)
	}
	c.s.notify(c.key)
	if !live {
		return fmt.Errorf("%w: %s %q had expired", fence.ErrNotHeld, c.kind, c.key)
	}
	return nil
}
