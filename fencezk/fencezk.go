// Package fencezk is a fence driver on Apache ZooKeeper: a FIFO queue of
// ephemeral sequential znodes per key, whose holder's czxid, plus the base
// of a clock-seeded token epoch, is the fencing token.
//
// The layout, under the driver's root ("/fence" by default):
//
//	<root>/%epoch                             persistent, data: the epoch's seed (see epoch.go)
//	<root>/%epoch/<seed>                      persistent, the epoch's mark, which enqueues check
//	<root>/<escaped key>                      a container znode, one per key
//	<root>/<escaped key>/n<escaped owner>-<10-digit sequence>
//	                                          ephemeral sequential, data {"owner":..., "meta":{...}}
//
// The escaped key is a single valid znode name (no "/", no "." or ".."
// name, only printable ASCII), so the queues of "a" and "a/b" are siblings
// and never nest. The holder is the child with the lowest sequence; the
// token is its czxid, the ZooKeeper transaction id that created it, plus
// the epoch's base: zxids are cluster-wide, persisted and grow across
// leader elections (the election epoch is their high half), so tokens
// grow across releases, expiries, failovers and restarts, also when a
// key's container is removed and created again; the epoch's base keeps
// them growing when the ensemble loses its data and its zxids start over.
//
//   - Enqueuing is one multi-operation: check the token epoch's mark,
//     create our ephemeral sequential child and touch the key's znode; the
//     touched znode's stat gives, in the same round trip, our czxid (its
//     mzxid: both changes share one zxid) and its number of children.
//     With one child we hold the key: the uncontended acquire is one round
//     trip.
//   - TryAcquire that finds others deletes its child again and reports the
//     holder: it never leaves a queue entry behind.
//   - Acquire (fence.BlockingAcquirer) waits by watching only the child just
//     before its own (no thundering herd); waiters are served in the order
//     they queued (FIFO). A cancelled wait deletes its child.
//   - Extend is a one-operation multi that checks our child still exists
//     (version 0): it goes through the leader, so it is linearizable, and
//     it succeeds only while our session lives. Release deletes our child.
//   - A lease is lost when its znode is deleted (an operator, or the
//     session's expiry) or when the session expires: a watch on the
//     holder's znode reports both at once through fence.SessionClaim.
//
// # Sessions and connection blips
//
// Ephemeral znodes live as long as the ZooKeeper session that created them.
// A connection that drops and reconnects (to the same or another server)
// within the session timeout keeps the session, its znodes and its watches:
// that is not a loss, and renewals that failed during the blip are retried
// by fence until its local validity ends. When the session expires, the
// server deletes the znodes, and the client learns of it when it
// reconnects: that is a loss. A client that cannot reach any server learns
// nothing; its leases then end when their local validity runs out, which is
// never after the server could expire the session, because the driver
// refuses TTLs longer than the session timeout.
//
// Semaphores and reader-writer locks are queues too, under containers of
// their own beside the key's (see kinds.go and docs/zookeeper.md).
//
// Leases here are session-bound (fencetest.Config.SessionBound): a holder
// that stops renewing keeps the key while its session lives; a dead
// process's keys are freed when its session expires. So are its waiting
// children: an ephemeral znode cannot move to another session, so a dead
// waiter holds up the queue behind it for up to the session timeout.
//
// Empty key znodes are containers (ZooKeeper 3.5.3 or newer): the server
// deletes them once their last child is gone (every minute by default,
// znode.container.checkIntervalMs), so keys do not pile up.
package fencezk

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/fifo"
	"github.com/fencing/fence/internal/kit/keyenc"
	"github.com/fencing/fence/internal/kit/retry"
	"github.com/fencing/fence/internal/kit/rwpref"
)

// DefaultRoot is the znode under which the driver keeps its queues unless
// WithRoot says otherwise.
const DefaultRoot = "/fence"

// Store is a fence.Driver on ZooKeeper. It is safe for concurrent use.
type Store struct {
	conn           *zk.Conn
	ownConn        bool
	sessionTimeout time.Duration
	granted        *atomic.Int64 // ms, as the server granted it (Dial only)
	root           string
	acl            []zk.ACL

	epochMu sync.Mutex
	epoch   epoch           // the token epoch, as the current session read it
	bases   map[int64]int64 // its bases by election, as read (see token)

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // claim watches and calls still in flight
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

// WithRoot sets the znode under which the driver keeps its queues, like a
// chroot: "/myapp/locks". Default DefaultRoot ("/fence"). It and its
// ancestors are created as persistent znodes when first needed. Drivers
// that share a root share locks.
func WithRoot(root string) Option {
	return func(d *Store) { d.root = "/" + strings.Trim(root, "/") }
}

// WithACL sets the ACL of the znodes the driver creates. Default
// zk.WorldACL(zk.PermAll).
func WithACL(acl []zk.ACL) Option {
	return func(d *Store) { d.acl = acl }
}

// New returns a Store over conn, which the caller keeps and closes after
// the Store. sessionTimeout must be the session timeout the server
// granted conn (the one given to zk.Connect, if the server's
// minSessionTimeout and maxSessionTimeout allow it): the driver refuses
// lease TTLs longer than it, so that the server can never expire the
// session while a lease is still valid locally.
func New(conn *zk.Conn, sessionTimeout time.Duration, opts ...Option) *Store {
	d := &Store{conn: conn, sessionTimeout: sessionTimeout, root: DefaultRoot, acl: zk.WorldACL(zk.PermAll)}
	for _, o := range opts {
		o(d)
	}
	d.ctx, d.cancel = context.WithCancel(context.Background())
	return d
}

// Dial connects to the ZooKeeper ensemble at servers ("host:port") with a
// session of sessionTimeout, waits (at most sessionTimeout) until the
// session is established, and returns a Store that owns the connection:
// Close closes it, which ends the session and frees every key the driver
// held or waited for at once. The connection logs nothing.
//
// If every server address refuses the connection (or has no route), Dial
// returns at once with those errors (matching syscall.ECONNREFUSED, for
// example) instead of waiting: nothing listens there. Servers that do not
// answer at all are waited for, up to sessionTimeout.
//
// The server may grant a shorter session timeout than asked (it clamps it
// to its minSessionTimeout and maxSessionTimeout); the driver then refuses
// lease TTLs longer than the granted one (see MaxTTL).
func Dial(servers []string, sessionTimeout time.Duration, opts ...Option) (*Store, error) {
	g := &grantWatch{ready: make(chan struct{})}
	hosts := zk.NewDNSHostProvider()
	r := newRefusals(hosts)
	conn, _, err := zk.Connect(servers, sessionTimeout, zk.WithLogger(g), zk.WithHostProvider(hosts), zk.WithDialer(r.dial))
	if err != nil {
		return nil, fmt.Errorf("fencezk: connect %v: %w", servers, err)
	}
	select {
	case <-g.ready:
	case err := <-r.refused:
		select {
		case <-g.ready: // a server came up meanwhile
		default:
			conn.Close()
			return nil, fmt.Errorf("fencezk: connect %v: %w", servers, err)
		}
	case <-time.After(sessionTimeout):
		conn.Close()
		return nil, fmt.Errorf("fencezk: connect %v: no session within %v", servers, sessionTimeout)
	}
	d := New(conn, sessionTimeout, opts...)
	d.ownConn = true
	d.granted = &g.ms
	return d, nil
}

// grantWatch is the connection's logger: it discards everything but learns
// the session timeout the server granted, which go-zookeeper only logs.
type grantWatch struct {
	ms    atomic.Int64
	once  sync.Once
	ready chan struct{}
}

func (g *grantWatch) Printf(format string, args ...any) {
	if format == "authenticated: id=%d, timeout=%d" && len(args) == 2 {
		if ms, ok := args[1].(int32); ok {
			g.ms.Store(int64(ms))
			g.once.Do(func() { close(g.ready) })
		}
	}
}

// sessionLimit is the longest TTL the driver grants: the session timeout
// asked for, or the one the server granted if shorter and known.
func (d *Store) sessionLimit() time.Duration {
	if d.granted != nil {
		if ms := d.granted.Load(); ms > 0 {
			return min(d.sessionTimeout, time.Duration(ms)*time.Millisecond)
		}
	}
	return d.sessionTimeout
}

// MaxTTL returns the longest lease TTL the driver grants: the session
// timeout, as the server granted it if it is known (Dial; the server
// clamps the timeout asked for to its minSessionTimeout and
// maxSessionTimeout, 40 s by default), else as given to New. TryAcquire
// and Acquire refuse longer TTLs with an error matching
// fence.ErrInvalidTTL.
func (d *Store) MaxTTL() time.Duration { return d.sessionLimit() }

// Close stops the driver's watches and, if the driver owns its connection
// (Dial), closes it.
func (d *Store) Close() error {
	d.cancel()
	if d.ownConn {
		d.conn.Close()
	}
	d.wg.Wait()
	return nil
}

// Conn returns the driver's ZooKeeper connection.
func (d *Store) Conn() *zk.Conn { return d.conn }

// names escapes keys and owners into znode names: printable ASCII but "/",
// "." and the escape byte, so no name is "." or "..".
var names = keyenc.New('%', keyenc.Printable("/."))

// KeyPath returns the znode under which key's queue lives.
func (d *Store) KeyPath(key string) string { return d.root + "/" + names.Encode(key) }

// seqLen is the length of the sequence ZooKeeper appends to sequential
// znode names.
const seqLen = 10

// child is one queue entry.
type child struct {
	name  string
	seq   int64
	kind  byte // 'n' lock, 's' semaphore, 'r' reader, 'w' writer
	limit int  // a semaphore entry's limit
}

func parseChild(name string) (child, bool) {
	if len(name) < seqLen+2 || !strings.ContainsRune("nsrw", rune(name[0])) || name[len(name)-seqLen-1] != '-' {
		return child{}, false
	}
	seq, err := strconv.ParseInt(name[len(name)-seqLen:], 10, 64)
	c := child{name: name, seq: seq, kind: name[0]}
	if c.kind == 's' {
		// s<limit>.<owner>-<seq>: escaped owners never hold a '.'.
		lim, _, ok := strings.Cut(name[1:], ".")
		if c.limit, err = strconv.Atoi(lim); !ok || err != nil {
			return child{}, false
		}
	}
	return c, err == nil
}

// queue returns the entries of a key's queue, lowest sequence first.
func queue(names []string) []child {
	q := make([]child, 0, len(names))
	for _, n := range names {
		if c, ok := parseChild(n); ok {
			q = append(q, c)
		}
	}
	slices.SortFunc(q, func(a, b child) int { return cmp.Compare(a.seq, b.seq) })
	return q
}

// entry is the data of a queue entry.
type entry struct {
	Owner string            `json:"owner"`
	Meta  map[string]string `json:"meta,omitempty"`
}

func (d *Store) checkTTL(req fence.Request) error {
	if limit := d.sessionLimit(); req.TTL > limit {
		return fmt.Errorf("%w: %v for key %q is longer than the ZooKeeper session timeout %v: the session could expire while the lease is valid",
			fence.ErrInvalidTTL, req.TTL, req.Key, limit)
	}
	return nil
}

// TryAcquire implements fence.Driver.
func (d *Store) TryAcquire(ctx context.Context, req fence.Request) (_ fence.Claim, err error) {
	defer func() { err = d.mark(err) }()
	if err := d.checkTTL(req); err != nil {
		return nil, err
	}
	path, token, n, sid, err := d.enqueue(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("fencezk: acquire %q: %w", req.Key, err)
	}
	if n == 1 {
		return d.newClaim(req.Key, path, token), nil
	}
	if req.Kind == fence.KindSemaphore || req.Kind == fence.KindRead {
		holds, err := d.holdsNow(ctx, req, path, n)
		if holds && err == nil {
			return d.newClaim(req.Key, path, token), nil
		}
		if err != nil {
			d.abandon(path)
			return nil, fmt.Errorf("fencezk: acquire %s %q: %w", req.Kind, req.Key, d.entryLost(err, sid))
		}
	}
	d.abandon(path)
	held := &fence.HeldError{Key: req.Key}
	if req.Kind == fence.KindSemaphore || req.SkipHolder {
		return nil, held
	}
	if h, err := d.holder(ctx, req.Key, parentOf(path)); err == nil {
		held.Holder = &h
	}
	return nil, held
}

// Acquire implements fence.BlockingAcquirer.
func (d *Store) Acquire(ctx context.Context, req fence.Request) (_ fence.Claim, err error) {
	defer func() { err = d.mark(err) }()
	if err := d.checkTTL(req); err != nil {
		return nil, err
	}
	path, token, n, sid, err := d.enqueue(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("fencezk: acquire %q: %w", req.Key, err)
	}
	if n > 1 {
		if err := d.waitKind(ctx, req, path, n); err != nil {
			d.abandon(path)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("fencezk: acquire %q: %w", req.Key, d.entryLost(err, sid))
		}
	}
	return d.newClaim(req.Key, path, token), nil
}

func parentOf(path string) string { return path[:strings.LastIndexByte(path, '/')] }

// enqueue creates this acquisition's ephemeral sequential child under the
// znode of the key's queue for its kind and touches that znode, in one
// multi-operation that also checks the token epoch is still the one this
// session read, creating the container (and the root) first if missing.
// It returns the child's path, its token (czxid plus the epoch's base),
// the number of children the queue had then, its own included (all the
// others were queued before it), and the session that owns the child.
func (d *Store) enqueue(ctx context.Context, req fence.Request) (path string, token int64, children int32, sid int64, err error) {
	data, _ := json.Marshal(entry{Owner: req.Owner, Meta: req.Meta})
	parent, prefix := d.queuePath(req)
	// The key's container may be removed by the server between our
	// creating it and our child, and the epoch may be gone with a new
	// session: a few attempts each.
	containers, epochs := 0, 0
	for {
		e, err := d.tokenBase(ctx)
		if err != nil {
			return "", 0, 0, 0, err
		}
		var resp []zk.MultiResponse
		err = d.await(ctx, func() (err error) {
			resp, err = d.conn.Multi(
				&zk.CheckVersionRequest{Path: e.mark, Version: 0},
				&zk.CreateRequest{Path: prefix, Data: data, Acl: d.acl, Flags: zk.FlagEphemeralSequential},
				&zk.SetDataRequest{Path: parent, Version: -1},
			)
			return err
		}, func() { d.abandonPrefix(parent, prefix) })
		if err != nil && ctx.Err() != nil {
			// The wait ended: the multi may still be running, and writes
			// resp when it returns (await's late cleans up after it), so
			// resp is not read here.
			return "", 0, 0, 0, err
		}
		if err == nil && d.sameSession(e) {
			st := resp[2].Stat
			token, err := d.token(ctx, e, st.Mzxid)
			if err == nil {
				return resp[1].String, token, st.NumChildren, e.sid, nil
			}
			d.abandon(resp[1].String)
			if !errors.Is(err, errEpochChanged) {
				return "", 0, 0, 0, err
			}
			if epochs++; epochs > 3 {
				return "", 0, 0, 0, fmt.Errorf("the token epoch %s keeps changing under the acquisition", d.epochPath())
			}
			continue
		}
		epochGone := err == nil || len(resp) > 0 && resp[0].Error != nil
		if err == nil {
			// Run by a session that did not read the epoch: the server
			// may have lost its data, and the epoch with it.
			d.abandon(resp[1].String)
		} else if !epochGone && (!errors.Is(err, zk.ErrNoNode) || containers == 3) {
			if errors.Is(err, zk.ErrConnectionClosed) {
				// The create may have been applied.
				d.abandonPrefix(parent, prefix)
			}
			return "", 0, 0, 0, err
		}
		if epochGone {
			d.forgetEpoch(e)
			if epochs++; epochs > 3 {
				return "", 0, 0, 0, fmt.Errorf("the token epoch %s keeps changing under the acquisition", d.epochPath())
			}
			continue
		}
		containers++
		if err := d.makeContainer(ctx, parent); err != nil {
			return "", 0, 0, 0, err
		}
	}
}

// withEpoch runs read with the token epoch of the driver's session, again
// if the session changed before read returned (the server may have lost
// its data, and the epoch with it) or read found the epoch changed.
func (d *Store) withEpoch(ctx context.Context, read func(e epoch) error) error {
	for range 3 {
		e, err := d.tokenBase(ctx)
		if err != nil {
			return err
		}
		err = read(e)
		if errors.Is(err, errEpochChanged) {
			continue
		}
		if err != nil || d.sameSession(e) {
			return err
		}
	}
	return errors.New("the ZooKeeper session or the token epoch kept changing while reading the token epoch")
}

// makeContainer creates the container znode path, and the root's persistent
// znodes if they are missing.
func (d *Store) makeContainer(ctx context.Context, path string) error {
	err := d.await(ctx, func() error {
		_, err := d.conn.CreateContainer(path, nil, zk.FlagContainer, d.acl)
		return err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		if err := d.makeRoot(ctx); err != nil {
			return err
		}
		return d.makeContainer(ctx, path)
	}
	if errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return err
}

func (d *Store) makeRoot(ctx context.Context) error {
	parts := strings.Split(strings.Trim(d.root, "/"), "/")
	for i := range parts {
		p := "/" + strings.Join(parts[:i+1], "/")
		err := d.await(ctx, func() error {
			_, err := d.conn.Create(p, nil, 0, d.acl)
			return err
		}, nil)
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create root %s: %w", p, err)
		}
	}
	return nil
}

var errEntryGone = errors.New("fencezk: queue entry vanished while waiting (session expired or znode deleted)")

// waitTurn returns once no child of path's queue is left for it to wait
// for (rwpref.WaitsFor: for a lock or a writer the one just before, for a
// reader the last writer before), watching only that one (no thundering
// herd), and confirms through the leader that path still exists.
func (d *Store) waitTurn(ctx context.Context, path string) error {
	return fifo.WaitTurn(ctx, turn{d: d, path: path})
}

// turn is a waiting child's view of its queue, for fifo.WaitTurn.
type turn struct {
	d    *Store
	path string
}

var _ fifo.Queue[string] = turn{}

// Ahead returns the path of the child to wait for.
func (t turn) Ahead(ctx context.Context) (string, bool, error) {
	q, i, err := t.d.listQueue(ctx, t.path)
	if err != nil {
		return "", false, err
	}
	j := waitsFor(q, i)
	if j < 0 {
		return "", false, nil
	}
	return parentOf(t.path) + "/" + q[j].name, true, nil
}

// AwaitGone waits for a watch on pred to fire.
func (t turn) AwaitGone(ctx context.Context, pred string) error {
	var (
		exists bool
		ch     <-chan zk.Event
	)
	if err := t.d.await(ctx, func() (err error) {
		exists, _, ch, err = t.d.conn.ExistsW(pred)
		return err
	}, nil); err != nil || !exists {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.d.ctx.Done():
		return errClosed
	case ev := <-ch:
		if ev.Type == zk.EventNotWatching {
			return fmt.Errorf("%w: %w", errEntryGone, ev.Err)
		}
		return nil
	}
}

// Confirm checks through the leader, as reads may come from a follower,
// that the waiting child and its session still live.
func (t turn) Confirm(ctx context.Context) error { return t.d.check(ctx, t.path) }

// waitsFor returns the index of the child that child i of queue q waits
// for, -1 if none.
func waitsFor(q []child, i int) int {
	return rwpref.WaitsFor(i, func(j int) bool { return q[j].kind == 'r' })
}

var errClosed = errors.New("fencezk: driver closed")

// check succeeds if path exists, through the leader (a multi with one
// version check), which also proves the session alive.
func (d *Store) check(ctx context.Context, path string) error {
	return d.await(ctx, func() error {
		_, err := d.conn.Multi(&zk.CheckVersionRequest{Path: path, Version: 0})
		return err
	}, nil)
}

// abandon deletes a queue entry this driver created (a TryAcquire that
// found others, a cancelled or failed wait) before the call returns. Its
// name is unique to one acquisition, so the delete touches nothing else.
// If ZooKeeper cannot answer now, the delete goes on in the background
// (retryGone): a session that outlives the outage would keep the entry,
// and the retry of a waiting Acquire would queue behind it for good.
func (d *Store) abandon(path string) {
	del := func() error { return d.conn.Delete(path, -1) }
	if err := del(); d.passing(err) {
		d.wg.Go(func() { d.retryGone(del) })
	}
}

// abandonPrefix deletes, in the background, the entry whose name starts
// with prefix, for a create whose outcome is unknown.
func (d *Store) abandonPrefix(parent, prefix string) {
	d.wg.Go(func() {
		d.retryGone(func() error {
			kids, _, err := d.conn.Children(parent)
			if err != nil {
				return err
			}
			for _, k := range kids {
				if p := parent + "/" + k; strings.HasPrefix(p, prefix) {
					if err := d.conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
						return err
					}
				}
			}
			return nil
		})
	})
}

// retryGone runs del, a delete of abandoned entries, and again every
// second while ZooKeeper cannot answer, until it succeeds or fails
// otherwise (zk.ErrNoNode: gone already, with its session maybe) or the
// driver is closed.
func (d *Store) retryGone(del func() error) {
	// A ZooKeeper call takes no context; the client bounds it by the
	// session's timeout.
	retry.Until(d.ctx, func(context.Context) error { return del() }, d.passing)
}

// await runs fn, a ZooKeeper call that takes no context, and returns its
// error, or ctx's if ctx ends first. In that case fn still completes in
// the background, and late (if set) runs after it succeeds; so a caller
// reads what fn writes only once await returned fn's own answer, never
// after ctx ended.
func (d *Store) await(ctx context.Context, fn func() error, late func()) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	done := make(chan error, 1)
	d.wg.Go(func() { done <- fn() })
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		if late != nil {
			d.wg.Go(func() {
				if <-done == nil {
					late()
				}
			})
		}
		return ctx.Err()
	}
}

// Inspect implements fence.Inspector. Leases here end with their session,
// so Holder.ExpiresIn is 0.
func (d *Store) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	return d.holder(ctx, key, d.KeyPath(key))
}

// holder returns the first entry of the queue under parent.
func (d *Store) holder(ctx context.Context, key, parent string) (h fence.Holder, err error) {
	var readErr error
	err = d.withEpoch(ctx, func(e epoch) error {
		h, readErr = d.holderAt(ctx, key, parent, e)
		return readErr
	})
	if err != nil && err != readErr {
		err = fmt.Errorf("fencezk: inspect %q: %w", key, err)
	}
	return h, err
}

// holderAt returns the first entry of the queue under parent, its token
// in epoch e.
func (d *Store) holderAt(ctx context.Context, key, parent string, e epoch) (fence.Holder, error) {
	var (
		kids []string
		pst  *zk.Stat
	)
	err := d.await(ctx, func() (err error) {
		kids, pst, err = d.conn.Children(parent)
		return err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
	}
	if err != nil {
		return fence.Holder{}, fmt.Errorf("fencezk: inspect %q: %w", key, err)
	}
	for _, c := range queue(kids) {
		var (
			data []byte
			st   *zk.Stat
		)
		err := d.await(ctx, func() (err error) {
			data, st, err = d.conn.Get(parent + "/" + c.name)
			return err
		}, nil)
		if errors.Is(err, zk.ErrNoNode) {
			continue // just left: the next one holds
		}
		if err != nil {
			return fence.Holder{}, fmt.Errorf("fencezk: inspect %q: %w", key, err)
		}
		token, err := d.token(ctx, e, st.Czxid, pst.Pzxid, pst.Mzxid)
		if err != nil {
			return fence.Holder{}, err
		}
		h := fence.Holder{Key: key, Token: token}
		var en entry
		if json.Unmarshal(data, &en) == nil {
			h.Owner, h.Meta = en.Owner, en.Meta
		}
		return h, nil
	}
	return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
}

// List implements fence.Lister: it reads the root's children, then each
// matching key's holder.
func (d *Store) List(ctx context.Context, prefix string) ([]fence.Holder, error) {
	var kids []string
	err := d.await(ctx, func() (err error) {
		kids, _, err = d.conn.Children(d.root)
		return err
	}, nil)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fencezk: list %q: %w", prefix, err)
	}
	var hs []fence.Holder
	for _, k := range kids {
		key, err := names.Decode(k)
		if err != nil || !strings.HasPrefix(key, prefix) {
			continue
		}
		h, err := d.Inspect(ctx, key)
		if errors.Is(err, fence.ErrNotHeld) {
			continue
		}
		if err != nil {
			return nil, err
		}
		hs = append(hs, h)
	}
	slices.SortFunc(hs, func(a, b fence.Holder) int { return strings.Compare(a.Key, b.Key) })
	return hs, nil
}
