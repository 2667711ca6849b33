package fence

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// AcquireAll takes every key in keys, all or none: it returns a LeaseSet
// holding one lease per key, each with its own fencing token, or an
// error and no lease at all. It waits while another owner holds one of
// the keys, as Acquire does for one key: until it has them all, ctx is
// done, or the wait timeout (WithWait, one budget for the whole call)
// passes, in which case it returns the *HeldError of a key it found held.
//
// Each attempt takes the keys it still lacks in one atomic step where the
// driver offers one (MultiAcquirer), and otherwise one by one in sorted
// order, up to the first key held. It then waits for that key the way
// Acquire waits (notifications, the store's queue or backoff), keeps it,
// and attempts the rest again. While it waits for a key it holds only
// keys sorted before it, releasing the others first; so two callers
// taking overlapping sets, in whatever order they list them, never
// deadlock: a cycle of waits would need a key sorted before itself.
//
// keys must be distinct valid keys, at least one (ErrInvalidKey
// otherwise). The options are those of Acquire and apply to every lease.
// Each lease is renewed and can be lost on its own, as a single lease;
// the set's context ends when any of them ends (see LeaseSet).
func (c *Client) AcquireAll(ctx context.Context, keys []string, opts ...AcquireOption) (*LeaseSet, error) {
	return c.acquireAll(ctx, keys, with(c.cfg, opts), true)
}

// TryAcquireAll makes one attempt to take every key in keys, all or none,
// and returns at once: if a key is held, the error is its *HeldError and
// nothing is held. It refuses WithWait (ErrInvalidOption).
func (c *Client) TryAcquireAll(ctx context.Context, keys []string, opts ...AcquireOption) (*LeaseSet, error) {
	return c.acquireAll(ctx, keys, tryConfig(c.cfg, opts, "TryAcquireAll"), false)
}

func (c *Client) acquireAll(ctx context.Context, keys []string, cfg *config, wait bool) (*LeaseSet, error) {
	sorted, err := sortedKeys(keys)
	if err != nil {
		return nil, err
	}
	for _, key := range sorted {
		if err := cfg.validate(key); err != nil {
			return nil, err
		}
		if err := c.supportsLockDelay(target{key: key}, cfg); err != nil {
			return nil, err
		}
	}
	if err := c.checkOpen(sorted[0]); err != nil {
		return nil, err
	}
	var deadline time.Time
	if wait && cfg.wait > 0 {
		deadline = time.Now().Add(cfg.wait)
	}
	multi, _ := c.drv.(MultiAcquirer)
	held := make(map[string]*Lease, len(sorted)) // the keys taken so far
	var down *outage                             // the store unavailable at the last try
	fail := func(err error) (*LeaseSet, error) {
		if rerr := releaseAll(ctx, slices.Collect(maps.Values(held)), cfg); rerr != nil {
			err = fmt.Errorf("%w; releasing the keys taken: %w", err, rerr)
		}
		return nil, err
	}
	for {
		rest := slices.DeleteFunc(slices.Clone(sorted), func(k string) bool { return held[k] != nil })
		var taken []*Lease
		if multi != nil {
			taken, err = c.tryAllAtomic(ctx, multi, rest, cfg)
			if errors.Is(err, ErrUnsupported) {
				multi = nil // not these keys in one step: one by one
				continue
			}
		} else {
			taken, err = c.tryAllInOrder(ctx, rest, cfg)
		}
		for _, l := range taken {
			held[l.key] = l
		}
		if err == nil {
			if lost := lostLeases(held); len(lost) > 0 {
				// Lost while waiting for another key: take it again.
				_ = releaseAll(ctx, lost, cfg)
				continue
			}
			leases := make([]*Lease, len(sorted))
			for i, k := range sorted {
				leases[i] = held[k]
			}
			return newLeaseSet(ctx, sorted, leases), nil
		}
		if wait && errors.Is(err, errLateReply) {
			continue
		}
		if wait && errors.Is(err, ErrUnavailable) {
			down = c.storeDown(cfg, rest[0], err, down)
			if err := down.sleepUntil(ctx, deadline); err != nil {
				return fail(fmt.Errorf("fence: acquire all: %w, the store unavailable since: %w", err, down.err))
			}
			continue
		}
		down = nil
		var he *HeldError
		if !wait || !errors.As(err, &he) {
			return fail(err)
		}
		var after []*Lease
		for k, l := range held {
			if k > he.Key {
				after = append(after, l)
				delete(held, k)
			}
		}
		if err := releaseAll(ctx, after, cfg); err != nil {
			return fail(err)
		}
		l, err := c.waitFor(ctx, he, cfg, deadline)
		if err != nil {
			return fail(err)
		}
		held[l.key] = l
	}
}

// lostLeases removes from held the leases that ended, and returns them.
func lostLeases(held map[string]*Lease) []*Lease {
	var lost []*Lease
	for k, l := range held {
		if l.Err() != nil {
			lost = append(lost, l)
			delete(held, k)
		}
	}
	return lost
}

// waitFor takes the key held reports, waiting for it with the one waiting
// mechanism Acquire has. The wait ends at deadline, unless that is zero.
func (c *Client) waitFor(ctx context.Context, held *HeldError, cfg *config, deadline time.Time) (*Lease, error) {
	if !deadline.IsZero() {
		w := *cfg
		w.wait = time.Until(deadline)
		if w.wait <= 0 {
			return nil, held
		}
		cfg = &w
	}
	return c.acquire(ctx, target{key: held.Key}, cfg, true)
}

// tryAllInOrder makes one attempt to take keys, sorted, one by one, up to
// the first that fails. It returns the leases it took, and that failure.
func (c *Client) tryAllInOrder(ctx context.Context, keys []string, cfg *config) ([]*Lease, error) {
	leases := make([]*Lease, 0, len(keys))
	for _, key := range keys {
		l, err := c.acquire(ctx, target{key: key}, cfg, false)
		if err != nil {
			return leases, err
		}
		leases = append(leases, l)
	}
	return leases, nil
}

// tryAllAtomic makes one attempt to take keys, sorted, in the driver's
// one atomic step.
func (c *Client) tryAllAtomic(ctx context.Context, m MultiAcquirer, keys []string, cfg *config) ([]*Lease, error) {
	sent := time.Now()
	reqs := make([]Request, len(keys))
	for i, key := range keys {
		reqs[i] = Request{Key: key, Owner: newOwnerID(cfg.ownerPrefix), TTL: cfg.ttl, Meta: holderMeta(cfg.meta, sent),
			LockDelay: cfg.lockDelay}
	}
	claims, err := m.TryAcquireAll(ctx, reqs)
	var held *HeldError
	switch {
	case errors.As(err, &held), errors.Is(err, ErrUnsupported):
		return nil, err
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("fence: acquire all %q: %w", keys, context.Cause(ctx))
	case err != nil:
		return nil, fmt.Errorf("fence: acquire all %q: %w", keys, err)
	case len(claims) != len(reqs):
		for _, cl := range claims {
			c.releaseQuietly(cl, cfg)
		}
		return nil, fmt.Errorf("fence: acquire all %q: driver returned %d claims for %d keys", keys, len(claims), len(reqs))
	}
	leases := make([]*Lease, 0, len(claims))
	for i, cl := range claims {
		l, err := c.grant(ctx, cfg, reqs[i], cl, sent)
		if err != nil {
			for _, rest := range claims[i+1:] {
				c.releaseQuietly(rest, cfg)
			}
			if rerr := releaseAll(ctx, leases, cfg); rerr != nil {
				return nil, errors.Join(err, rerr)
			}
			return nil, err
		}
		leases = append(leases, l)
	}
	return leases, nil
}

// releaseAll releases leases taken for a set that AcquireAll does not
// return whole. A lease found lost is no error: the store holds nothing
// of it.
func releaseAll(ctx context.Context, leases []*Lease, cfg *config) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ttl)
	defer cancel()
	var errs []error
	for _, l := range leases {
		if err := l.Release(ctx); err != nil && !errors.Is(err, ErrLost) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// sortedKeys returns keys sorted, refusing an empty list and duplicates.
func sortedKeys(keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, fmt.Errorf("%w: no keys to acquire", ErrInvalidKey)
	}
	sorted := slices.Clone(keys)
	slices.Sort(sorted)
	for i := 1; i < len(sorted); i++ {
		if sorted[i] == sorted[i-1] {
			return nil, fmt.Errorf("%w: key %q given twice", ErrInvalidKey, sorted[i])
		}
	}
	return sorted, nil
}

// LeaseSet is the leases of one AcquireAll, one per key, sorted by key.
// Each lease has its own token (send each resource the token of its key),
// is renewed on its own and can be lost on its own; the set's context
// ends when any of them is lost or released, with that lease's cause, so
// that work needing every key stops as soon as one is gone. A LeaseSet
// is safe for concurrent use.
type LeaseSet struct {
	keys   []string
	leases []*Lease
	ctx    context.Context
	cancel context.CancelCauseFunc
}

func newLeaseSet(ctx context.Context, keys []string, leases []*Lease) *LeaseSet {
	s := &LeaseSet{keys: keys, leases: leases}
	s.ctx, s.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	for _, l := range leases {
		// The lease's context outlives the set's end only by this
		// function, which ends with it.
		context.AfterFunc(l.Context(), func() { s.cancel(context.Cause(l.Context())) })
	}
	return s
}

// Leases returns the set's leases, sorted by key.
func (s *LeaseSet) Leases() []*Lease { return slices.Clone(s.leases) }

// Lease returns the lease of key, or nil if key is not in the set.
func (s *LeaseSet) Lease(key string) *Lease {
	if i, ok := slices.BinarySearch(s.keys, key); ok {
		return s.leases[i]
	}
	return nil
}

// Context returns a context that is cancelled the moment any lease of the
// set is lost or released; context.Cause tells which (that lease's
// *LostError, or an error matching ErrReleased). It carries the values of
// the context given to AcquireAll, not its cancellation.
func (s *LeaseSet) Context() context.Context { return s.ctx }

// Done returns a channel that is closed when any lease of the set is lost
// or released.
func (s *LeaseSet) Done() <-chan struct{} { return s.ctx.Done() }

// Err returns nil while every lease is held, then the cause of the first
// to end: a *LostError (matching ErrLost) or an error matching
// ErrReleased.
func (s *LeaseSet) Err() error {
	if s.ctx.Err() == nil {
		return nil
	}
	return context.Cause(s.ctx)
}

// Release releases every lease of the set (see Lease.Release), the set's
// context first. It returns what the releases returned, joined: a
// *LostError for each lease that was lost, before or as found by its
// release, and ErrReleased for those released before. A set with a lost
// lease must still be released, to free the other keys at once.
func (s *LeaseSet) Release(ctx context.Context) error {
	s.cancel(fmt.Errorf("%w: %q", ErrReleased, s.keys))
	var errs []error
	for _, l := range s.leases {
		if err := l.Release(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
