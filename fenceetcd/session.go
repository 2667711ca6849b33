package fenceetcd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// session is one etcd lease that the driver keeps alive and binds queue
// entries to.
type session struct {
	d   *Store
	key int64 // its entry in d.sessions (see Store.lease)
	id  clientv3.LeaseID
	ttl time.Duration // as granted

	mu    sync.Mutex
	until time.Time // the lease lives in etcd at least until then (monotonic)
	cause error     // why it ended; nil while it lives

	// ended is cancelled when the session ends (waiters select on its
	// Done; claims hang context.AfterFunc on it).
	ended  context.Context
	endNow context.CancelFunc

	// slots are the entry names in use on this session, by the prefix
	// they go under (see takeSlot).
	slotMu sync.Mutex
	slots  map[string][]bool

	// delays are the claims whose lock-delay leases the session keeps
	// alive (see lockdelay.go).
	delayMu sync.Mutex
	delays  map[*claim]bool
}

// takeSlot returns the lowest entry number not in use on this session under
// prefix, and marks it used. Entry names are reused this way, not made
// unique per acquisition: etcd keeps a deleted key in its index until a
// compaction, and every acquisition ranges over its queue's directory, so
// unique names would make each acquisition slower than the last until a
// compaction (docs/performance.md says by how much). Numbers are given back
// only once the entry is known to be gone: reusing the name of an entry
// that still exists would keep its create revision, which is its token.
func (s *session) takeSlot(prefix string) int {
	s.slotMu.Lock()
	defer s.slotMu.Unlock()
	if s.slots == nil {
		s.slots = make(map[string][]bool)
	}
	used := s.slots[prefix]
	for i, u := range used {
		if !u {
			used[i] = true
			return i
		}
	}
	s.slots[prefix] = append(used, true)
	return len(used)
}

// freeSlot gives entry number slot under prefix back.
func (s *session) freeSlot(prefix string, slot int) {
	s.slotMu.Lock()
	defer s.slotMu.Unlock()
	used := s.slots[prefix]
	if slot < 0 || slot >= len(used) {
		return
	}
	used[slot] = false
	for _, u := range used {
		if u {
			return
		}
	}
	delete(s.slots, prefix) // keys used once leave nothing behind
}

// entryName is the name of the session's entry number slot: the lease id
// and the number, unique among every session's entries.
func (s *session) entryName(slot int) string {
	return strconv.FormatInt(int64(s.id), 16) + "." + strconv.Itoa(slot)
}

// session returns a live session for leases of ttl whose lease is known to
// live for at least ttl from now, granting one if needed.
func (d *Store) session(ctx context.Context, ttl time.Duration) (*session, error) {
	s, err := d.lease(ctx, sessionTTL(ttl), sessionTTL(ttl))
	if err != nil {
		return nil, err
	}
	if err := s.ensure(ctx, ttl); err != nil {
		return nil, err
	}
	return s, nil
}

// waiterTTL is the TTL of the lease a waiting entry is bound to until it
// is granted (see waitSession): how long a waiter that died without
// deleting its entry can stand in the queue, at most.
const waiterTTL = 5 * time.Second

// waitSession returns the live lease that entries of session s's
// acquisitions are bound to while they wait: a short one (waiterTTL, or
// s's own TTL if shorter), so that a waiter killed before it could delete
// its entry delays those behind it by seconds, not by s's TTL. An entry is
// bound to s itself once granted (see Store.rebind). The lease is shared
// by every waiter of s's TTL and kept alive like a session.
func (d *Store) waitSession(ctx context.Context, s *session) (*session, error) {
	w, err := d.lease(ctx, -s.key, min(s.key, int64(waiterTTL/time.Second)))
	if err != nil {
		return nil, err
	}
	return w, w.ensure(ctx, 0)
}

// grantedWaitSession returns s's waiter lease if it has been granted and
// lives, else nil, without a round trip.
func (d *Store) grantedWaitSession(s *session) *session {
	d.mu.Lock()
	w := d.sessions[-s.key]
	d.mu.Unlock()
	if w == nil || w.err() != nil || !time.Now().Before(w.liveUntil()) {
		return nil
	}
	return w
}

// lease returns the live session d.sessions holds under k, granting one of
// seconds if there is none. Keys above 0 are sessions of holders (by
// requested TTL in seconds), below 0 their waiters' leases.
func (d *Store) lease(ctx context.Context, k, seconds int64) (*session, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errClosed
	}
	if s := d.sessions[k]; s != nil && s.err() == nil {
		return s, nil
	}
	// The grant holds d.mu: let Close end it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(d.ctx, cancel)()
	sent := time.Now()
	resp, err := d.cli.Grant(ctx, seconds)
	if err != nil {
		return nil, fmt.Errorf("grant session lease: %w", err)
	}
	granted := time.Duration(resp.TTL) * time.Second
	s := &session{d: d, key: k, id: resp.ID, ttl: granted, until: sent.Add(granted)}
	s.ended, s.endNow = context.WithCancel(context.Background())
	d.sessions[k] = s
	d.wg.Add(1)
	go s.keep()
	return s, nil
}

// err returns why the session ended, or nil while it lives.
func (s *session) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cause
}

func (s *session) liveUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.until
}

// end ends the session with cause, once.
func (s *session) end(cause error) {
	s.mu.Lock()
	if s.cause != nil {
		s.mu.Unlock()
		return
	}
	s.cause = cause
	s.endNow()
	s.mu.Unlock()
	s.d.mu.Lock()
	if s.d.sessions[s.key] == s {
		delete(s.d.sessions, s.key)
	}
	s.d.mu.Unlock()
}

// ensure makes sure the lease lives for at least ttl from now, refreshing
// it first if the last keepalive does not reach that far.
func (s *session) ensure(ctx context.Context, ttl time.Duration) error {
	if err := s.err(); err != nil {
		return err
	}
	if time.Until(s.liveUntil()) >= ttl {
		return nil
	}
	return s.refresh(ctx)
}

// refresh sends one keepalive and moves until to its send time plus the
// TTL etcd answered with. It gives up when until passes: by then the lease
// may have expired in etcd.
func (s *session) refresh(ctx context.Context) error {
	ctx, cancel := context.WithDeadline(ctx, s.liveUntil())
	defer cancel()
	sent := time.Now()
	resp, err := s.d.cli.KeepAliveOnce(ctx, s.id)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		s.end(errSessionGone)
		return errSessionGone
	}
	if err != nil {
		if !time.Now().Before(s.liveUntil()) {
			err = fmt.Errorf("%w: no keepalive answered within its TTL (%v)", errSessionGone, err)
			s.end(err)
		}
		return err
	}
	s.mu.Lock()
	if until := sent.Add(time.Duration(resp.TTL) * time.Second); until.After(s.until) {
		s.until = until
	}
	s.mu.Unlock()
	s.keepDelays(ctx)
	return nil
}

// keep refreshes the session every quarter of its TTL until it ends or the
// driver closes, then revokes its lease so that its entries go at once.
func (s *session) keep() {
	defer s.d.wg.Done()
	interval := s.ttl / 4
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for s.err() == nil {
		select {
		case <-s.d.ctx.Done():
			s.end(errClosed)
			continue
		case <-s.ended.Done():
			continue
		case <-timer.C:
		}
		if err := s.refresh(s.d.ctx); err == nil {
			timer.Reset(interval)
		} else {
			// Retry sooner, a few times before the lease could expire.
			timer.Reset(max(10*time.Millisecond, min(interval, time.Until(s.liveUntil())/4)))
		}
	}
	if s.err() == errSessionGone {
		s.startDelays() // etcd said the lease is gone
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(s.ttl, 5*time.Second))
	defer cancel()
	if _, err := s.d.cli.Revoke(ctx, s.id); err == nil || errors.Is(err, rpctypes.ErrLeaseNotFound) {
		s.startDelays()
	}
}
