package fencetest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

// The self-test's unbroken drivers. The plain one is fencemem itself.
// sessionDriver below is fencemem with every claim bound to a session of
// its own, which the test can kill in the "store" (Store.KillSession),
// and with a blocking Acquire that waits inside the driver: the shape of
// etcd, ZooKeeper and the SQL session stores, for the broken drivers that
// break a session's or a blocking wait's rules.

// sessionDriver is fencemem with killable sessions and a blocking Acquire.
type sessionDriver struct {
	*fencemem.Store

	// Hooks for broken drivers; nil in the unbroken one.
	wrap         func(*session) fence.Claim // what TryAcquire returns for a session
	refuse       func(fence.Request) bool   // TryAcquire refuses the request as held
	onCancel     func(fence.Request)        // a blocking Acquire ended by its context
	afterRelease func(key string)           // a claim was released
	killKeeps    func(fence.Kind) bool      // a killed session's lease stays in the store
	unmarked     bool                       // an outage's errors do not match fence.ErrUnavailable

	down atomic.Bool // in an outage (Store.Outage): nothing is acquired

	mu       sync.Mutex
	sessions map[*session]struct{}
}

func newSessionDriver(store *fencemem.Store) *sessionDriver {
	return &sessionDriver{Store: store, sessions: make(map[*session]struct{})}
}

var (
	_ fence.BlockingAcquirer = (*sessionDriver)(nil)
	_ fence.SessionClaim     = (*session)(nil)
)

// session is one claim and the session that holds it.
type session struct {
	fence.Claim // fencemem's
	d           *sessionDriver
	key         string
	kind        fence.Kind

	mu     sync.Mutex
	notify func(error)
	ended  error
}

// errDown is what the session base answers in an outage, as a client
// whose connection is refused does.
var errDown = errors.New("connect: connection refused")

// outage is Store.Outage: the "store" answers nothing until restored.
func (d *sessionDriver) outage(*testing.T) func() {
	d.down.Store(true)
	return func() { d.down.Store(false) }
}

// unavailable returns the outage's error, if the store is down.
func (d *sessionDriver) unavailable() error {
	switch {
	case !d.down.Load():
		return nil
	case d.unmarked:
		return errDown
	}
	return fmt.Errorf("%w: %w", fence.ErrUnavailable, errDown)
}

func (d *sessionDriver) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	if err := d.unavailable(); err != nil {
		return nil, err
	}
	if d.refuse != nil && d.refuse(req) {
		return nil, &fence.HeldError{Key: req.Key}
	}
	c, err := d.Store.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	s := &session{Claim: c, d: d, key: req.Key, kind: req.Kind}
	d.mu.Lock()
	d.sessions[s] = struct{}{}
	d.mu.Unlock()
	if d.wrap != nil {
		return d.wrap(s), nil
	}
	return s, nil
}

// Acquire waits inside the driver, woken by fencemem's watch or a short
// poll (fencemem does not report expiries).
func (d *sessionDriver) Acquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	if err := d.unavailable(); err != nil {
		return nil, err
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	ch, err := d.Store.Watch(wctx, req.Key)
	if err != nil {
		return nil, err
	}
	for {
		c, err := d.TryAcquire(ctx, req)
		if err == nil {
			return c, nil
		}
		var held *fence.HeldError
		if !errors.As(err, &held) {
			if ctx.Err() != nil {
				d.cancelled(req)
			}
			return nil, err
		}
		select {
		case <-ctx.Done():
			d.cancelled(req)
			return nil, ctx.Err()
		case <-ch:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// cancelled is a blocking Acquire ended by its context, whether in its
// wait or in a try.
func (d *sessionDriver) cancelled(req fence.Request) {
	if d.onCancel != nil {
		d.onCancel(req)
	}
}

// kill ends the session of a holder of key in kind, as a server that
// drops a connection would: the lease goes, and the session reports it.
func (d *sessionDriver) kill(_ context.Context, key string, kind fence.Kind) error {
	d.mu.Lock()
	var victim *session
	for s := range d.sessions {
		if s.key == key && s.kind == kind {
			victim = s
			break
		}
	}
	delete(d.sessions, victim)
	d.mu.Unlock()
	if victim == nil {
		return fmt.Errorf("no session holds %s %q", kind, key)
	}
	if d.killKeeps == nil || !d.killKeeps(kind) {
		_ = victim.Claim.Release(context.Background())
	}
	victim.end(fmt.Errorf("%w: %s %q: session killed", fence.ErrNotHeld, kind, key))
	return nil
}

func (d *sessionDriver) forget(s *session) {
	d.mu.Lock()
	delete(d.sessions, s)
	d.mu.Unlock()
}

func (s *session) end(cause error) {
	s.mu.Lock()
	s.ended = cause
	f := s.notify
	s.mu.Unlock()
	if f != nil {
		f(cause)
	}
}

func (s *session) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended
}

func (s *session) NotifyLost(f func(error)) {
	s.mu.Lock()
	if err := s.ended; err != nil {
		s.mu.Unlock()
		f(err)
		return
	}
	s.notify = f
	s.mu.Unlock()
}

func (s *session) Extend(ctx context.Context, ttl time.Duration) error {
	if err := s.err(); err != nil {
		return err
	}
	return s.Claim.Extend(ctx, ttl)
}

func (s *session) Release(ctx context.Context) error {
	s.d.forget(s)
	if err := s.err(); err != nil {
		return err
	}
	err := s.Claim.Release(ctx)
	if s.d.afterRelease != nil {
		s.d.afterRelease(s.key)
	}
	return err
}
