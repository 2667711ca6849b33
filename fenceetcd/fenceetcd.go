// Package fenceetcd is a fence driver on etcd v3: a FIFO queue of
// contenders per key, each a key bound to a lease the driver keeps alive
// (its session), whose create revision, plus a clock-seeded base, is the
// fencing token.
//
// The layout, under the driver's prefix ("fence" by default):
//
//	<prefix>/<escaped key>/<lease id>.<n>   value: {"owner":..., "meta":{...}}
//	<prefix>/%epoch                         value: the token epoch's seed (epoch.go)
//
// The escaped key contains no "/" (see below), so the entries of "a" and
// of "a/b" are siblings and never nest. An entry's name is its session's
// etcd lease id (hex) and a number the session reuses once the entry is
// gone, so a key's directory holds few distinct names however often it is
// taken (see session.takeSlot); the owner is in the value. Every contender puts its entry
// bound to its session lease; the holder is the entry with the smallest
// create revision. The token is the holder entry's create revision plus
// the base of the token epoch (see epoch.go): etcd's revision counter is
// cluster-wide, persisted and never goes back, so it grows across
// releases, expiries, leader changes and restarts; and the epoch, seeded
// from a clock, keeps tokens growing when a cluster that lost its data
// starts its revisions over.
//
//   - TryAcquire is one transaction: if no entry exists under the key, put
//     ours; otherwise read the holder. It never leaves an entry behind.
//   - Acquire (fence.BlockingAcquirer) is one transaction too: if no entry
//     is ahead, put ours; otherwise queue it under a short waiter lease
//     (5 s), marked as waiting. A waiting entry watches only the entry
//     just before its own (no thundering herd) until it is first, then
//     binds its entry to its session in one more transaction (a put to
//     an existing key keeps its create revision: its place and its
//     token). Waiters are served in the order they queued (FIFO). A
//     cancelled wait deletes its entry; a waiter that dies without doing
//     so leaves an entry that expires with its waiter lease, so it holds
//     up those behind it for seconds, not for its session's TTL.
//   - Extend checks, in one transaction, that our entry still exists with
//     our create revision, after making sure the session lease is known to
//     live for at least the TTL; Release deletes the entry, a plain Delete
//     (its name is this acquisition's alone until then). Neither touches
//     another owner's entry.
//   - A lease is lost when its session lease expires or is revoked, or when
//     its entry disappears (an operator deleted it): the claim reports it
//     (fence.SessionClaim) at once when the session's keepalive finds it
//     over, and from a watch on the entry, which starts 100 ms after the
//     grant (so that the many leases released sooner cost no watch; it
//     replays a deletion meanwhile); Extend refuses too.
//   - Resume (fence.Resumer) binds the holder entry, if its owner and
//     create revision match, to this process's session in one
//     transaction (see resume.go); the token stays.
//   - A lock-delay (fence.LockDelayer) is a delay entry beside the key's
//     queue, put in the acquisition's transaction under an etcd lease of
//     its own that outlives the session by the delay; every lock
//     acquisition requires it absent (see lockdelay.go).
//
// # Sessions
//
// The driver grants one etcd lease per distinct TTL (rounded up to whole
// seconds), of 1.5 times that TTL, and keeps it alive with its own
// keepalive every quarter of its TTL. It records, on this machine's
// monotonic clock, a lower bound of when the lease can expire in etcd
// (send time of the last successful keepalive plus the granted TTL). An
// acquisition or renewal whose TTL would reach past that bound first
// refreshes the session, so the store never frees a key while its holder's
// local validity runs. If no keepalive succeeds before that bound, the
// session is over: its holders lose their leases and its waiters stop
// waiting with an error (never returning a lease taken after the session
// ended, the bug of etcd#11456). That error, and those that say etcd could
// not answer, match fence.ErrUnavailable (unavailable.go): a Client's
// waiting Acquire queues again, on a new session.
//
// Semaphores and reader-writer locks are queues too, in directories of
// their own beside the lock's (see kinds.go and docs/etcd.md): the first
// Limit entries of a semaphore hold; a reader holds when no writer is
// ahead of it, a writer when it is first. Their tokens are create
// revisions as well.
//
// Leases here are session-bound (fencetest.Config.SessionBound): a lease
// whose holder stops renewing stays held in etcd while the holder's
// process keeps its session, and a dead process's keys are freed when its
// session lease expires, within 1.5 TTL; its waiting entries within 5 s.
package fenceetcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/delayq"
	"github.com/fencing/fence/internal/kit/fifo"
	"github.com/fencing/fence/internal/kit/keyenc"
	"github.com/fencing/fence/internal/kit/metajson"
)

// DefaultPrefix is where the driver keeps its keys unless WithPrefix says
// otherwise.
const DefaultPrefix = "fence"

// Store is a fence.Driver on etcd. It is safe for concurrent use. Close
// it when done: it revokes the driver's sessions, which frees every key it
// still holds or waits for.
type Store struct {
	cli  *clientv3.Client
	root string // prefix + "/"

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // session and claim goroutines

	mu       sync.Mutex
	sessions map[int64]*session // see Store.lease
	closed   bool

	watches *delayq.Queue // starts the watches on holders' entries; see claim.go
}

var (
	_ fence.Driver           = (*Store)(nil)
	_ fence.BlockingAcquirer = (*Store)(nil)
	_ fence.Inspector        = (*Store)(nil)
	_ fence.Lister           = (*Store)(nil)
	_ fence.SessionClaim     = (*claim)(nil)
)

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the etcd key prefix under which the driver keeps its
// queues. Default DefaultPrefix ("fence"). Drivers that share a prefix
// share locks.
func WithPrefix(prefix string) Option {
	return func(d *Store) { d.root = strings.TrimSuffix(prefix, "/") + "/" }
}

// New returns a Store over cli. The caller keeps ownership of cli and
// closes it after the Store.
func New(cli *clientv3.Client, opts ...Option) *Store {
	d := &Store{cli: cli, root: DefaultPrefix + "/", sessions: make(map[int64]*session), watches: delayq.New(watchDelay)}
	for _, o := range opts {
		o(d)
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	return d
}

// Close ends the driver's sessions (revoking their leases, so the keys it
// held or waited for are freed at once) and stops its goroutines. It does
// not close the etcd client.
func (d *Store) Close() error {
	d.cancel() // first: it ends a grant in progress, which holds d.mu
	d.watches.Close()
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	d.wg.Wait()
	return nil
}

// Prefix returns the etcd key prefix, with its trailing slash.
func (d *Store) Prefix() string { return d.root }

// names escapes keys and owners into etcd key segments without "/".
var names = keyenc.New('%', keyenc.Printable("/"))

// dir returns the prefix of key's queue entries, ending in "/".
func (d *Store) dir(key string) string { return d.root + names.Encode(key) + "/" }

// Dir returns the etcd key prefix under which key's queue entries live
// (etcdctl get --prefix shows the queue; the first by create revision
// holds the lock).
func (d *Store) Dir(key string) string { return d.dir(key) }

// entry is one contender's queue entry, as stored.
type entry struct {
	Owner string            `json:"owner"`
	Meta  map[string]string `json:"meta,omitempty"`
	Limit int               `json:"limit,omitempty"` // a semaphore's
	// Waiting marks an entry still bound to its waiter lease: one that
	// has not been granted yet, even if it is first (its waiter is about
	// to take the key, or died waiting). See Store.rebind.
	Waiting bool `json:"waiting,omitempty"`
}

// holder describes the first of kvs, the holder's entry, with tokens of
// base. It reports no holder if that entry is still waiting: then no one
// holds the key yet.
func holder(key string, kvs []*mvccpb.KeyValue, base int64) (fence.Holder, bool) {
	if len(kvs) == 0 {
		return fence.Holder{}, false
	}
	var e entry
	if json.Unmarshal(kvs[0].Value, &e) == nil && e.Waiting {
		return fence.Holder{}, false
	}
	h := fence.Holder{Key: key, Token: base + kvs[0].CreateRevision, Owner: e.Owner, Meta: e.Meta}
	return h, true
}

// sessionTTL is the session lease TTL, in seconds, for leases of ttl: half
// as long again, so that the background keepalive (every quarter of it)
// keeps the session alive for at least ttl ahead without a round trip at
// acquire time.
func sessionTTL(ttl time.Duration) int64 {
	return max(1, int64((ttl*3/2+time.Second-1)/time.Second))
}

// TryAcquire implements fence.Driver: one transaction that puts this
// owner's entry only if the key has none, and otherwise reads the holder.
func (d *Store) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	c, err := d.tryAcquire(ctx, req)
	if errors.Is(err, errSessionGone) {
		c, err = d.tryAcquire(ctx, req) // once more, on a new session
	}
	return c, markUnavailable(ctx, err)
}

func (d *Store) tryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	s, err := d.session(ctx, req.TTL)
	if err != nil {
		return nil, fmt.Errorf("fenceetcd: acquire %q: %w", req.Key, err)
	}
	q := d.queueOf(s, req)
	if req.Kind == fence.KindSemaphore {
		return d.trySlot(ctx, s, req, q)
	}
	dl, err := d.grantDelay(ctx, s, req, 0)
	if err != nil {
		s.freeSlot(q.prefix, q.slot)
		return nil, fmt.Errorf("fenceetcd: acquire %q: %w", req.Key, err)
	}
	resp, err := d.cli.Txn(ctx).
		If(append(delayFree(q), clientv3.Compare(clientv3.CreateRevision(q.ahead), "=", 0).WithPrefix())...).
		Then(append(delayPut(q, dl), clientv3.OpPut(q.name, q.val, clientv3.WithLease(s.id)), d.epochGet())...).
		Else(append(append([]clientv3.Op{clientv3.OpGet(q.dir, clientv3.WithFirstCreate()...)}, delayGet(q)...), d.epochGet())...).
		Commit()
	if err != nil {
		// The puts may have been applied though the reply was lost.
		d.abandon(s, q, s)
		d.revokeDelay(dl)
		return nil, d.opError("acquire", req.Key, err, s)
	}
	base, err := d.baseIn(ctx, resp)
	if !resp.Succeeded {
		s.freeSlot(q.prefix, q.slot) // nothing was put
		d.revokeDelay(dl)
		if err != nil {
			return nil, fmt.Errorf("fenceetcd: acquire %q: %w", req.Key, err)
		}
		return nil, heldBy(req.Key, resp.Responses[0].GetResponseRange().Kvs, delayIn(resp, q), base)
	}
	if err != nil {
		return nil, d.untokened(s, q, dl, req.Key, err)
	}
	c := d.newClaim(s, req.Key, q, resp.Header.Revision, base)
	c.keepDelay(dl, q.delay)
	return c, nil
}

// delayIn is the lock-delay entry read by a failed acquisition of q, whose
// Else reads the key's first entry, then its delay entry (locks only),
// then the epoch.
func delayIn(resp *clientv3.TxnResponse, q queue) []*mvccpb.KeyValue {
	if q.delay == "" {
		return nil
	}
	return rangeOf(resp, 1)
}

// untokened undoes a grant of q whose token cannot be known (the epoch
// could not be read or seeded): it deletes the entry (and the delay
// lease) and returns the error.
func (d *Store) untokened(s *session, q queue, dl *delayLease, key string, err error) error {
	d.abandon(s, q, s)
	d.revokeDelay(dl)
	return fmt.Errorf("fenceetcd: acquire %q: %w", key, err)
}

// rangeOf is the keys read by the i-th operation of resp, if it has one.
func rangeOf(resp *clientv3.TxnResponse, i int) []*mvccpb.KeyValue {
	if i >= len(resp.Responses) {
		return nil
	}
	return resp.Responses[i].GetResponseRange().Kvs
}

// Acquire implements fence.BlockingAcquirer: it queues this owner's entry
// and waits, watching only its predecessor, until it is first. A wait
// whose session or waiter lease (see waitSession) ends stops with an
// error, never granting an entry that may have expired; the error matches
// fence.ErrUnavailable, so the Client tries again with a new entry.
func (d *Store) Acquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	c, err := d.acquire(ctx, req)
	return c, markUnavailable(ctx, err)
}

func (d *Store) acquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	s, err := d.session(ctx, req.TTL)
	if err != nil {
		return nil, fmt.Errorf("fenceetcd: acquire %q: %w", req.Key, err)
	}
	if req.Kind == fence.KindSemaphore {
		w, err := d.waitSession(ctx, s)
		if err != nil {
			return nil, fmt.Errorf("fenceetcd: acquire %q: %w", req.Key, err)
		}
		return d.acquireSlot(ctx, s, w, req, d.queueOf(s, req))
	}
	q := d.queueOf(s, req)
	// Nothing ahead: take the key under the session, as TryAcquire does.
	// Else queue under the waiter lease, marked as waiting: in the same
	// transaction if the lease is granted already (it is granted at the
	// first wait, not before, so that clients that never wait keep no
	// second lease alive).
	w := d.grantedWaitSession(s)
	dl, err := d.grantDelay(ctx, s, req, 0)
	if err != nil {
		s.freeSlot(q.prefix, q.slot)
		return nil, fmt.Errorf("fenceetcd: acquire %q: %w", req.Key, err)
	}
	txn := d.cli.Txn(ctx).
		If(append(delayFree(q), clientv3.Compare(clientv3.CreateRevision(q.ahead), "=", 0).WithPrefix())...).
		Then(append(delayPut(q, dl), clientv3.OpPut(q.name, q.val, clientv3.WithLease(s.id)), d.epochGet())...)
	bound := []*session{s}
	if w != nil {
		txn = txn.Else(clientv3.OpPut(q.name, encodeWaitingEntry(req), clientv3.WithLease(w.id)))
		bound = append(bound, w)
	}
	resp, err := txn.Commit()
	if err != nil {
		d.abandon(s, q, bound...)
		d.revokeDelay(dl)
		return nil, d.opError("acquire", req.Key, err, bound...)
	}
	rev := resp.Header.Revision
	if resp.Succeeded {
		base, err := d.baseIn(ctx, resp)
		if err != nil {
			return nil, d.untokened(s, q, dl, req.Key, err)
		}
		c := d.newClaim(s, req.Key, q, rev, base)
		c.keepDelay(dl, q.delay)
		return c, nil
	}
	// The delay lease would expire while waiting: the rebind grants one.
	d.revokeDelay(dl)
	if w == nil {
		if w, err = d.waitSession(ctx, s); err != nil {
			s.freeSlot(q.prefix, q.slot) // nothing was put
			return nil, fmt.Errorf("fenceetcd: acquire %q: %w", req.Key, err)
		}
		put, err := d.cli.Put(ctx, q.name, encodeWaitingEntry(req), clientv3.WithLease(w.id))
		if err != nil {
			d.abandon(s, q, w)
			return nil, d.opError("acquire", req.Key, err, s, w)
		}
		rev = put.Header.Revision
	}
	if err := d.waitTurn(ctx, s, w, q.ahead, q.name, rev); err != nil {
		d.abandon(s, q, w)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("fenceetcd: acquire %q: %w", req.Key, err)
	}
	dl, base, err := d.rebind(ctx, s, w, q, rev, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("fenceetcd: acquire %q: %w", req.Key, err)
	}
	c := d.newClaim(s, req.Key, q, rev, base)
	c.keepDelay(dl, q.delay)
	return c, nil
}

var (
	errSessionGone = errors.New("fenceetcd: session lease expired or revoked")
	errEntryGone   = errors.New("fenceetcd: queue entry deleted while waiting")
	// errWaitLeaseGone: a waiter's entry went, or may have gone, with its
	// waiter lease (etcd unreachable for its TTL, or the lease revoked).
	errWaitLeaseGone = errors.New("fenceetcd: waiter lease expired or revoked")
)

// rebind grants a waiting entry, name q.name created at rev, that has
// reached its turn: one transaction that, if the entry still exists with
// that create revision, binds it to the holder's session s instead of the
// waiter lease and clears its waiting mark. A put to an existing key keeps
// its create revision, so the entry keeps its place and its token, and at
// every moment it is bound to one of the two leases: a waiter that dies
// before the rebind leaves an entry that expires with its waiter lease.
// If the entry has gone meanwhile (the waiter lease expired), nothing is
// put and the wait fails. The entry is deleted again if the outcome is
// unknown.
//
// For a lock, the transaction also compares that the key has no
// lock-delay entry, and puts the entry of req's own delay, if it asks
// for one, under a lease granted for it (returned): while a lost
// holder's delay runs, the entry, first in the queue, waits for the
// delay entry's deletion.
//
// It returns the token base read with the grant (see epoch.go).
func (d *Store) rebind(ctx context.Context, s, w *session, q queue, rev int64, req fence.Request) (*delayLease, int64, error) {
	for {
		dl, err := d.grantDelay(ctx, s, req, rev)
		if err != nil {
			d.abandon(s, q, w)
			return nil, 0, err
		}
		resp, err := d.cli.Txn(ctx).
			If(append(delayFree(q), clientv3.Compare(clientv3.CreateRevision(q.name), "=", rev))...).
			Then(append(delayPut(q, dl), clientv3.OpPut(q.name, q.val, clientv3.WithLease(s.id)), d.epochGet())...).
			Else(append([]clientv3.Op{clientv3.OpGet(q.name)}, delayGet(q)...)...).
			Commit()
		if err != nil {
			d.abandon(s, q, s, w)
			d.revokeDelay(dl)
			if errors.Is(err, rpctypes.ErrLeaseNotFound) {
				s.end(errSessionGone)
				return nil, 0, errSessionGone
			}
			return nil, 0, err
		}
		if resp.Succeeded {
			base, err := d.baseIn(ctx, resp)
			if err != nil {
				d.abandon(s, q, s)
				d.revokeDelay(dl)
				return nil, 0, err
			}
			return dl, base, nil
		}
		d.revokeDelay(dl)
		if mine := rangeOf(resp, 0); len(mine) == 0 || mine[0].CreateRevision != rev {
			err := d.entryGone(ctx, s, w)
			d.abandon(s, q, w) // gone: this frees its name
			return nil, 0, err
		}
		// A lost holder's lock-delay runs.
		if err := d.waitDelay(ctx, s, w, q.delay, resp.Header.Revision); err != nil {
			d.abandon(s, q, w)
			return nil, 0, err
		}
	}
}

// waitTurn returns once no entry under ahead was created before the entry
// name, created at rev: for a lock (ahead is the key's queue), once the
// entry is first. It watches the entry under ahead created last before it
// for deletion, again and again (fifo.WaitTurn), and fails if the session
// or the waiter lease w ends or the entry itself vanishes.
func (d *Store) waitTurn(ctx context.Context, s, w *session, ahead, name string, rev int64) error {
	return fifo.WaitTurn(ctx, turn{d: d, s: s, w: w, ahead: ahead, name: name, rev: rev})
}

// turn is a waiting entry's view of its queue, for fifo.WaitTurn.
type turn struct {
	d           *Store
	s, w        *session
	ahead, name string
	rev         int64
}

// pred is an entry ahead of a waiting one.
type pred struct {
	key       string
	createRev int64
}

var _ fifo.Queue[pred] = turn{}

// Ahead reads, in one transaction, the waiting entry and the entry under
// t.ahead created last before it.
func (t turn) Ahead(ctx context.Context) (pred, bool, error) {
	resp, err := t.d.cli.Txn(ctx).
		Then(clientv3.OpGet(t.name),
			clientv3.OpGet(t.ahead, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(t.rev-1))...)).
		Commit()
	if err != nil {
		return pred{}, false, err
	}
	if mine := resp.Responses[0].GetResponseRange().Kvs; len(mine) == 0 || mine[0].CreateRevision != t.rev {
		return pred{}, false, t.d.entryGone(ctx, t.s, t.w)
	}
	kvs := resp.Responses[1].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return pred{}, false, nil
	}
	return pred{string(kvs[0].Key), kvs[0].CreateRevision}, true, nil
}

// AwaitGone watches p for deletion.
func (t turn) AwaitGone(ctx context.Context, p pred) error {
	return t.d.waitGone(ctx, t.s, t.w, p.key, p.createRev)
}

// Confirm grants the turn unless a lease ended meanwhile.
func (t turn) Confirm(context.Context) error { return waiting(t.s, t.w) }

// waiting returns nil while both the session s and the waiter lease w of
// a waiting entry live, else why one ended.
func waiting(s, w *session) error {
	if err := s.err(); err != nil {
		return err
	}
	if err := w.err(); err != nil {
		return fmt.Errorf("%w: %w", errWaitLeaseGone, err)
	}
	return nil
}

// entryGone returns why a waiting entry bound to w has vanished: its
// session or waiter lease ended (a keepalive tells, if the driver has not
// noticed yet), or someone deleted it (errEntryGone).
func (d *Store) entryGone(ctx context.Context, s, w *session) error {
	if err := waiting(s, w); err != nil {
		return err
	}
	_ = w.refresh(ctx) // ends w if etcd no longer has it
	if err := waiting(s, w); err != nil {
		return err
	}
	return errEntryGone
}

// waitGone waits until the entry key, created at createRev, is gone, or the
// watch breaks (the caller looks again). It watches from the current
// revision rather than from the one the caller read at: etcd serves a watch
// that starts in the past from a loop that catches up every 100 ms, and
// under contention there is always a write in between, so a release could
// reach the waiter up to 100 ms late (it showed in the handoffs' p99;
// docs/performance.md). Once the watch is in place it reads the entry once
// more, so a deletion before the watch started is not missed.
func (d *Store) waitGone(ctx context.Context, s, w *session, key string, createRev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := d.cli.Watch(wctx, key, clientv3.WithFilterPut(), clientv3.WithCreatedNotify())
	return d.awaitDelete(ctx, s, w, wch, func() bool {
		resp, err := d.cli.Get(ctx, key)
		return err != nil || len(resp.Kvs) == 0 || resp.Kvs[0].CreateRevision != createRev
	})
}

// waitDeleted waits until key (or, with clientv3.WithPrefix, a key under
// it) is deleted at or after revision from, or the watch breaks (the
// caller looks again).
func (d *Store) waitDeleted(ctx context.Context, s, w *session, key string, from int64, opts ...clientv3.OpOption) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wch := d.cli.Watch(wctx, key, append([]clientv3.OpOption{clientv3.WithRev(from), clientv3.WithFilterPut()}, opts...)...)
	return d.awaitDelete(ctx, s, w, wch, nil)
}

// awaitDelete returns once wch reports a deletion, breaks (the caller
// looks again), or the wait ends (ctx, the session s or waiter lease w,
// the Store). If the watch was made WithCreatedNotify, once it is in
// place it asks gone whether the deletion happened before, and returns if
// so.
func (d *Store) awaitDelete(ctx context.Context, s, w *session, wch clientv3.WatchChan, gone func() bool) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.ended.Done():
			return waiting(s, w)
		case <-w.ended.Done():
			return waiting(s, w)
		case <-d.ctx.Done():
			return errClosed
		case wr, ok := <-wch:
			if !ok || wr.Err() != nil {
				return nil // look again
			}
			if wr.Created {
				if gone != nil && gone() {
					return nil // gone already, or look again
				}
				continue
			}
			for _, ev := range wr.Events {
				if ev.Type == clientv3.EventTypeDelete {
					return nil
				}
			}
		}
	}
}

var errClosed = errors.New("fenceetcd: driver closed")

// abandon deletes a queue entry of session s this driver may have put (a
// cancelled wait, an acquire whose reply was lost). The entry's name is
// unique to one acquisition, so the delete touches nothing else. If etcd
// cannot be reached to delete it, the leases the entry may be bound to
// stop being kept alive, so that it expires with them instead of standing
// in the queue for ever; leases held on the same session are then lost,
// loudly, and waits on the same waiter lease stop with an error.
func (d *Store) abandon(s *session, q queue, bound ...*session) {
	ctx, cancel := context.WithTimeout(d.ctx, s.ttl)
	defer cancel()
	if _, err := d.cli.Delete(ctx, q.name); err != nil {
		for _, b := range bound {
			b.end(fmt.Errorf("fenceetcd: could not delete abandoned queue entry %s: %w", q.name, err))
		}
		return
	}
	s.freeSlot(q.prefix, q.slot)
}

// opError wraps a failed etcd call that bound an entry to one of leases.
// A missing lease means a session or waiter lease is over; a keepalive of
// each tells which, and ends it.
func (d *Store) opError(op, key string, err error, leases ...*session) error {
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		err = d.leaseGone(leases)
	}
	return fmt.Errorf("fenceetcd: %s %q: %w", op, key, err)
}

// leaseGone ends the one of leases (a session and, if two, its waiter
// lease) that etcd no longer has, and returns why the operation failed.
func (d *Store) leaseGone(leases []*session) error {
	s := leases[0]
	if len(leases) == 1 {
		s.end(errSessionGone)
		return errSessionGone
	}
	ctx, cancel := context.WithTimeout(d.ctx, s.ttl)
	defer cancel()
	for _, l := range leases {
		_ = l.refresh(ctx)
	}
	if err := waiting(s, leases[1]); err != nil {
		return err
	}
	// No keepalive could tell which: end both, as their keepalives would.
	for _, l := range leases {
		l.end(errSessionGone)
	}
	return errSessionGone
}

// Inspect implements fence.Inspector. Leases here end with their session,
// so Holder.ExpiresIn is 0. While the first entry is a waiter that has
// not bound it to its session yet, the key has no holder: its next
// waiter is taking it, or died waiting and its entry is about to expire.
// A key in a lost holder's lock-delay shows that holder, with ExpiresIn
// the time left on the delay entry's lease.
func (d *Store) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	resp, err := d.cli.Txn(ctx).
		Then(clientv3.OpGet(d.dir(key), clientv3.WithFirstCreate()...), clientv3.OpGet(d.delayName(key)), d.epochGet()).
		Commit()
	if err != nil {
		return fence.Holder{}, fmt.Errorf("fenceetcd: inspect %q: %w", key, err)
	}
	kvs, lost := rangeOf(resp, 0), rangeOf(resp, 1)
	base, err := d.baseFor(ctx, resp)
	if err != nil {
		return fence.Holder{}, fmt.Errorf("fenceetcd: inspect %q: %w", key, err)
	}
	h, ok := holder(key, kvs, base)
	if ok {
		return h, nil
	}
	if len(lost) > 0 {
		h, err := d.delayHolder(ctx, key, lost[0], base)
		if err != nil {
			return fence.Holder{}, fmt.Errorf("fenceetcd: inspect %q: %w", key, err)
		}
		return h, nil
	}
	if len(kvs) > 0 {
		return fence.Holder{}, fmt.Errorf("%w: %q has no holder: it is being handed to the next waiter", fence.ErrNotHeld, key)
	}
	return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
}

// List implements fence.Lister. It reads every queue entry under prefix in
// one range request, and shows the lost holder of a key in its lock-delay
// from its delay entry (with one more request for its lease's TTL).
func (d *Store) List(ctx context.Context, prefix string) ([]fence.Holder, error) {
	tx, err := d.cli.Txn(ctx).
		Then(clientv3.OpGet(d.root+names.Encode(prefix),
			clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend)),
			d.epochGet()).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("fenceetcd: list %q: %w", prefix, err)
	}
	resp := tx.Responses[0].GetResponseRange()
	var base int64
	if len(resp.Kvs) > 0 {
		if base, err = d.baseIn(ctx, tx); err != nil {
			return nil, fmt.Errorf("fenceetcd: list %q: %w", prefix, err)
		}
	}
	var hs []fence.Holder
	seen := make(map[string]bool)
	held := make(map[string]bool)
	var delayed []*mvccpb.KeyValue
	for _, kv := range resp.Kvs {
		rest := strings.TrimPrefix(string(kv.Key), d.root)
		if enc, ok := strings.CutSuffix(rest, "%lockdelay"); ok && !strings.Contains(enc, "/") {
			delayed = append(delayed, kv)
			continue
		}
		i := strings.IndexByte(rest, '/')
		if i < 0 || seen[rest[:i]] {
			continue // not ours, or a waiter behind the holder
		}
		seen[rest[:i]] = true
		key, err := names.Decode(rest[:i])
		if err != nil {
			continue
		}
		if h, ok := holder(key, []*mvccpb.KeyValue{kv}, base); ok {
			hs = append(hs, h)
			held[rest[:i]] = true
		}
	}
	for _, kv := range delayed {
		enc := strings.TrimSuffix(strings.TrimPrefix(string(kv.Key), d.root), "%lockdelay")
		key, err := names.Decode(enc)
		if err != nil || held[enc] {
			continue // not ours, or its holder lives
		}
		h, err := d.delayHolder(ctx, key, kv, base)
		if err != nil {
			return nil, fmt.Errorf("fenceetcd: list %q: %w", prefix, err)
		}
		hs = append(hs, h)
	}
	slices.SortFunc(hs, func(a, b fence.Holder) int { return strings.Compare(a.Key, b.Key) })
	return hs, nil
}

// encodeEntry is the JSON of an entry for req, byte for byte what
// json.Marshal writes, built by hand (Marshal of a struct holding a map
// allocates several times, on every acquisition).
func encodeEntry(req fence.Request) string { return appendEntry(req, false) }

// encodeWaitingEntry is encodeEntry's JSON with the waiting mark.
func encodeWaitingEntry(req fence.Request) string { return appendEntry(req, true) }

func appendEntry(req fence.Request, waiting bool) string {
	b := make([]byte, 0, 56+len(req.Owner)+metajson.Size(req.Meta))
	b = metajson.AppendString(append(b, `{"owner":`...), req.Owner)
	if len(req.Meta) > 0 {
		b = metajson.Append(append(b, `,"meta":`...), req.Meta)
	}
	if req.Limit != 0 {
		b = strconv.AppendInt(append(b, `,"limit":`...), int64(req.Limit), 10)
	}
	if waiting {
		b = append(b, `,"waiting":true`...)
	}
	b = append(b, '}')
	return unsafe.String(unsafe.SliceData(b), len(b)) // b is never written again
}
