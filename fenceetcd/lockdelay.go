package fenceetcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence"
)

// Lock-delay (fence.LockDelayer). A lock acquired with Request.LockDelay
// d puts, in the transaction that grants it, a delay entry beside the
// key's queue:
//
//	<prefix>/<escaped key>%lockdelay   value: {"owner":..., "meta":{...}, "delay":..., "token":...}
//
// An escaped key never holds "%" followed by a lower-case letter (see
// kinds.go), so the name belongs to no key's queue. The entry is bound to
// an etcd lease of its own, one per claim, of the session's TTL plus d
// rounded up to whole seconds, kept alive after each keepalive of the
// session: it outlives the holder entry by d at least, whichever way the
// session ends. A lease shared by the claims of a session would live as
// long as the process: a claim lost while it runs (its entry deleted)
// would block its key for ever.
//
// Every lock acquisition (TryAcquire, Acquire, a waiter's rebind,
// TryAcquireAll) compares, in its transaction, that the delay entry is
// absent; a waiter that reaches the front of the queue while it exists
// watches it until it is deleted. Release deletes the holder and delay
// entries in one transaction, only if the holder entry is still this
// claim's: a late Release by a lost holder leaves the delay in place.
//
// When the driver learns that a claim's holder entry is gone without a
// release (etcd says the session lease is gone, the driver revoked it at
// Close, or the entry was deleted), it moves the delay entry to a fresh
// lease of d, rounded up to whole seconds: etcd cannot shorten a lease,
// and the delay would otherwise run for up to the session's TTL plus d.
// A process that dies or loses etcd cannot do so: its delay then ends
// when the delay lease expires, d after its session lease at the latest
// keepalive. etcd raises a lease's TTL to its minimum (1.5 election
// timeouts): a shorter delay lasts that long.
//
// The lost holder's entry's create revision is the delay entry's when
// the entry was put with the holder's (the same transaction), else the
// value's "rev"; its token is that plus the base of the token epoch.

// delayName is the etcd key of key's lock-delay entry.
func (d *Store) delayName(key string) string { return d.root + names.Encode(key) + "%lockdelay" }

// delayEntry is a lock-delay entry, as stored.
type delayEntry struct {
	Owner string            `json:"owner"`
	Meta  map[string]string `json:"meta,omitempty"`
	Delay time.Duration     `json:"delay"`
	Rev   int64             `json:"rev,omitempty"` // the holder entry's create revision, if not the delay entry's
}

// SupportsLockDelay implements fence.LockDelayer: the Store keeps the
// lock-delay of locks.
func (d *Store) SupportsLockDelay(k fence.Kind) bool { return k == fence.KindLock }

var _ fence.LockDelayer = (*Store)(nil)

// wholeSeconds is t rounded up to whole seconds, at least one.
func wholeSeconds(t time.Duration) int64 { return max(1, int64((t+time.Second-1)/time.Second)) }

// delayLease is the lease and value of a claim's delay entry, before
// the claim exists.
type delayLease struct {
	id    clientv3.LeaseID
	val   string
	delay time.Duration
}

// grantDelay grants the delay lease of a lock acquisition of req on
// session s, whose holder entry is created at rev (0: at the revision of
// the transaction that puts the delay entry too). It returns nil if req
// asks for no delay.
func (d *Store) grantDelay(ctx context.Context, s *session, req fence.Request, rev int64) (*delayLease, error) {
	if req.Kind != fence.KindLock || req.LockDelay <= 0 {
		return nil, nil
	}
	val, err := json.Marshal(delayEntry{Owner: req.Owner, Meta: req.Meta, Delay: req.LockDelay, Rev: rev})
	if err != nil {
		return nil, err
	}
	resp, err := d.cli.Grant(ctx, wholeSeconds(s.ttl)+wholeSeconds(req.LockDelay))
	if err != nil {
		return nil, fmt.Errorf("grant lock-delay lease: %w", err)
	}
	return &delayLease{id: resp.ID, val: string(val), delay: req.LockDelay}, nil
}

// revoke revokes the delay lease, which deletes the delay entry if it
// was put; if etcd cannot be reached, it expires by itself.
func (d *Store) revokeDelay(l *delayLease) {
	if l == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = d.cli.Revoke(ctx, l.id)
}

// delayFree is the comparison that q's key has no lock-delay entry, for
// locks; none for other kinds.
func delayFree(q queue) []clientv3.Cmp {
	if q.delay == "" {
		return nil
	}
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(q.delay), "=", 0)}
}

// delayPut is the put of the delay entry of l, if any.
func delayPut(q queue, l *delayLease) []clientv3.Op {
	if l == nil {
		return nil
	}
	return []clientv3.Op{clientv3.OpPut(q.delay, l.val, clientv3.WithLease(l.id))}
}

// delayGet reads q's key's delay entry, for locks.
func delayGet(q queue) []clientv3.Op {
	if q.delay == "" {
		return nil
	}
	return []clientv3.Op{clientv3.OpGet(q.delay)}
}

// lostHolder describes the holder that a delay entry kv keeps the key
// for, with tokens of base.
func lostHolder(key string, kv *mvccpb.KeyValue, base int64) fence.Holder {
	var e delayEntry
	_ = json.Unmarshal(kv.Value, &e)
	rev := e.Rev
	if rev == 0 {
		rev = kv.CreateRevision
	}
	return fence.Holder{Key: key, Token: base + rev, Owner: e.Owner, Meta: e.Meta}
}

// heldBy is the *fence.HeldError of key, whose queue's first entries are
// first and whose delay entry, if read, is delay, with tokens of base.
func heldBy(key string, first []*mvccpb.KeyValue, delay []*mvccpb.KeyValue, base int64) *fence.HeldError {
	held := &fence.HeldError{Key: key}
	if h, ok := holder(key, first, base); ok {
		held.Holder = &h
	} else if len(delay) > 0 {
		h := lostHolder(key, delay[0], base)
		held.Holder = &h
	}
	return held
}

// keepDelay makes l the claim's delay lease: the session keeps it alive.
func (c *claim) keepDelay(l *delayLease, name string) {
	if l == nil {
		return
	}
	c.delay, c.delayLease, c.delayVal, c.delayDur = name, l.id, l.val, l.delay
	c.s.delayMu.Lock()
	if c.s.delays == nil {
		c.s.delays = make(map[*claim]bool)
	}
	c.s.delays[c] = true
	c.s.delayMu.Unlock()
}

// dropDelay stops keeping the claim's delay lease alive. It reports
// whether it did, once.
func (c *claim) dropDelay() bool {
	if c.delay == "" {
		return false
	}
	c.s.delayMu.Lock()
	defer c.s.delayMu.Unlock()
	if !c.s.delays[c] {
		return false
	}
	delete(c.s.delays, c)
	return true
}

// delayClaims returns the claims whose delay leases s keeps alive.
func (s *session) delayClaims() []*claim {
	s.delayMu.Lock()
	defer s.delayMu.Unlock()
	cs := make([]*claim, 0, len(s.delays))
	for c := range s.delays {
		cs = append(cs, c)
	}
	return cs
}

// keepDelays sends a keepalive for every delay lease of s, after one of
// s that succeeded, so that each outlives s by its delay. A delay lease
// that etcd no longer has (revoked by hand) cannot keep its delay: its
// claim is reported lost.
func (s *session) keepDelays(ctx context.Context) {
	for _, c := range s.delayClaims() {
		_, err := s.d.cli.KeepAliveOnce(ctx, c.delayLease)
		if errors.Is(err, rpctypes.ErrLeaseNotFound) && c.dropDelay() {
			c.Report(fmt.Errorf("%w: %q: its lock-delay lease %x is gone", fence.ErrNotHeld, c.key, int64(c.delayLease)))
		}
	}
}

// startDelays starts the lock-delay of every claim of s, whose lease
// etcd no longer has (so their holder entries are gone).
func (s *session) startDelays() {
	for _, c := range s.delayClaims() {
		if c.dropDelay() {
			c.startDelay()
		}
	}
}

// startDelay moves the delay entry of a claim whose holder entry is
// known to be gone (and dropDelay done) to a fresh lease of its delay,
// and revokes its old one: the key is then free d after now. If etcd
// cannot be reached, the old lease, no longer kept alive, expires by
// itself.
func (c *claim) startDelay() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.d.cli.Grant(ctx, wholeSeconds(c.delayDur))
	if err != nil {
		return
	}
	tx, err := c.d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.LeaseValue(c.delay), "=", c.delayLease)).
		Then(clientv3.OpPut(c.delay, c.delayVal, clientv3.WithLease(resp.ID))).
		Commit()
	if err != nil {
		return // the put may have been applied: leave both leases to expire
	}
	if !tx.Succeeded {
		_, _ = c.d.cli.Revoke(ctx, resp.ID) // the entry is gone, or not ours
	}
	_, _ = c.d.cli.Revoke(ctx, c.delayLease)
}

// waitDelay waits, for a waiter of key at the front of its queue, until
// the delay entry name, still there at revision at, is deleted.
func (d *Store) waitDelay(ctx context.Context, s, w *session, name string, at int64) error {
	return d.waitDeleted(ctx, s, w, name, at+1)
}

// inDelay is the error of an operation on a lease of key that is in its
// lock-delay: it has ended.
func inDelay(key string, h fence.Holder) error {
	return fmt.Errorf("%w: %q: the lease of %q (token %d) has ended; the key is in its lock-delay", fence.ErrNotHeld, key, h.Owner, h.Token)
}

// delayHolder describes the lost holder of the delay entry kv, with
// ExpiresIn the time left on its lease.
func (d *Store) delayHolder(ctx context.Context, key string, kv *mvccpb.KeyValue, base int64) (fence.Holder, error) {
	h := lostHolder(key, kv, base)
	ttl, err := d.cli.TimeToLive(ctx, clientv3.LeaseID(kv.Lease))
	if err != nil {
		return fence.Holder{}, err
	}
	h.ExpiresIn = max(time.Duration(ttl.TTL)*time.Second, time.Nanosecond)
	return h, nil
}
