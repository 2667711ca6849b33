package fence

import (
	"context"
	cryptorand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"
)

// Client acquires leases from one store through its Driver. It owns
// everything that is the same for every store: waiting, renewal, local
// validity and loss. A Client is safe for concurrent use.
type Client struct {
	drv     Driver
	batcher BatchExtender // drv, if it is one; nil otherwise
	cfg     *config       // never changed once made; calls and leases share it
	sched   schedule      // the leases' deadlines

	observer Observer // nil: none
	store    string   // the store's name, for observers and logs
	overruns overruns

	mu     sync.Mutex
	leases map[*Lease]struct{}
	closed bool
}

// New returns a Client over drv. The options are the Client's settings:
// each Option among them is the default for every call, which calls may
// override.
func New(drv Driver, opts ...ClientOption) *Client {
	if drv == nil {
		panic("fence: New with nil Driver")
	}
	cfg := with(defaultConfig(), opts)
	c := &Client{drv: drv, cfg: cfg, leases: make(map[*Lease]struct{}), observer: cfg.observer, store: cfg.storeName}
	if c.store == "" {
		c.store = storeName(drv)
	}
	c.batcher, _ = drv.(BatchExtender)
	return c
}

// Driver returns the Client's driver, for access to its optional
// interfaces.
func (c *Client) Driver() Driver { return c.drv }

// Acquire takes key, waiting while another owner holds it: until the key
// is free, ctx is done, or the wait timeout (WithWait) passes, in which
// case it returns a *HeldError. Waiting uses the store's notifications or
// server-side queue where it has one, and polls with jittered backoff
// otherwise, waking at the holder's reported expiry.
//
// Leases are not reentrant: a second Acquire of a key this process already
// holds waits like any other contender.
//
// ctx bounds the wait only; the lease's own context (Lease.Context) carries
// ctx's values but not its cancellation.
func (c *Client) Acquire(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return c.acquire(ctx, target{key: key}, with(c.cfg, opts), true)
}

// TryAcquire makes one attempt to take key and returns at once. If another
// owner holds it, the error is a *HeldError matching ErrHeld, carrying the
// holder where the store can tell. It refuses WithWait (ErrInvalidOption):
// it never waits.
func (c *Client) TryAcquire(ctx context.Context, key string, opts ...AcquireOption) (*Lease, error) {
	return c.acquire(ctx, target{key: key}, tryConfig(c.cfg, opts, "TryAcquire"), false)
}

// tryConfig is the config of a call that never waits, named call: cfg
// with opts applied, refusing WithWait.
func tryConfig(cfg *config, opts []AcquireOption, call string) *config {
	return refuse(with(cfg, opts), opts, "WithWait", call, "never waits")
}

// Inspect returns the current holder of key. The error matches ErrNotHeld
// if the key is free, and ErrUnsupported if the store cannot tell.
func (c *Client) Inspect(ctx context.Context, key string) (Holder, error) {
	if err := ValidateKey(key); err != nil {
		return Holder{}, err
	}
	in, ok := c.drv.(Inspector)
	if !ok {
		return Holder{}, fmt.Errorf("%w: inspect %q", ErrUnsupported, key)
	}
	return in.Inspect(ctx, key)
}

// List returns the holders of the held keys that start with prefix, sorted
// by key. The error matches ErrUnsupported if the store cannot list.
func (c *Client) List(ctx context.Context, prefix string) ([]Holder, error) {
	l, ok := c.drv.(Lister)
	if !ok {
		return nil, fmt.Errorf("%w: list", ErrUnsupported)
	}
	return l.List(ctx, prefix)
}

// Close releases every lease the Client still holds and makes later
// acquisitions fail with ErrClosed. It returns the errors of the releases
// that failed, joined, and the *LostError of every lease a release found
// lost (the store no longer held it), so that such a loss is never
// silent.
func (c *Client) Close(ctx context.Context) error {
	c.mu.Lock()
	c.closed = true
	held := make([]*Lease, 0, len(c.leases))
	for l := range c.leases {
		held = append(held, l)
	}
	c.mu.Unlock()
	var errs []error
	for _, l := range held {
		if err := l.Release(ctx); err != nil && !errors.Is(err, ErrReleased) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// target is what an acquisition takes: a key, of a kind.
type target struct {
	key   string
	kind  Kind
	limit int // KindSemaphore
}

func (c *Client) acquire(ctx context.Context, tgt target, cfg *config, wait bool) (l *Lease, err error) {
	key := tgt.key
	start := time.Now()
	var waited time.Duration
	waiting := false
	callCtx := ctx // ctx, or the observer's (carrying its span)
	if c.observer != nil {
		callCtx = c.observer.AcquireStart(callCtx, AcquireStart{Store: c.store, Key: key, Kind: tgt.kind, Wait: wait, Start: start})
	}
	defer func() {
		if c.observer != nil {
			e := AcquireEnd{Store: c.store, Key: key, Kind: tgt.kind, Wait: wait, Outcome: outcomeOf(err), Err: err,
				Duration: time.Since(start), Waited: waited, Waiting: waiting}
			if l != nil {
				e.Owner, e.Token = l.owner, l.token
			}
			c.observer.AcquireEnd(callCtx, e)
		}
	}()

	if err := cfg.validate(key); err != nil {
		return nil, err
	}
	if err := c.supports(tgt); err != nil {
		return nil, err
	}
	if err := c.supportsLockDelay(tgt, cfg); err != nil {
		return nil, err
	}
	if err := c.checkOpen(key); err != nil {
		return nil, err
	}
	req := Request{Key: key, Owner: newOwnerID(cfg.ownerPrefix), TTL: cfg.ttl, Meta: holderMeta(cfg.meta, start),
		Kind: tgt.kind, Limit: tgt.limit, LockDelay: cfg.lockDelay}
	if cfg.resumeToken != 0 {
		l, err = c.resume(ctx, callCtx, cfg, req)
		return l, err
	}
	blocking, _ := c.drv.(BlockingAcquirer)
	// A lock's waiter that will wait in the driver needs no holder from
	// its try (waitEnded reads it by Inspect if the wait times out). Other
	// kinds have no Inspect to read it then. Observation never changes
	// what the driver is asked: observers get the holder's token only
	// where the try returned it anyway.
	req.SkipHolder = wait && blocking != nil && tgt.kind == KindLock

	// The first attempt is the same for every store and every mode: one
	// try, which is the whole uncontended path. Its validity is measured
	// from start, a few microseconds before the request is sent: earlier
	// is the safe side, and it spares a clock read.
	sent := start
	claim, err := c.drv.TryAcquire(callCtx, req)
	if err == nil {
		l, err = c.grant(ctx, cfg, req, claim, sent)
		if !wait || !errors.Is(err, errLateReply) {
			return l, err
		}
	}
	var held *HeldError
	if err != nil && !errors.Is(err, errLateReply) && (!wait || !errors.As(err, &held) && !errors.Is(err, ErrUnavailable)) {
		return nil, c.acquireError(ctx, key, err)
	}
	var down *outage
	if wait && held == nil && errors.Is(err, ErrUnavailable) {
		down = c.storeDown(cfg, key, err, nil)
	}

	waitStart := time.Now()
	if c.observer != nil {
		var holderToken int64
		if held != nil && held.Holder != nil {
			holderToken = held.Holder.Token
		}
		c.observer.WaitStart(callCtx, WaitStart{Store: c.store, Key: key, Kind: tgt.kind, HolderToken: holderToken})
	}
	waiting = true
	defer func() {
		waited = time.Since(waitStart)
	}()
	waitCtx := callCtx
	if cfg.wait > 0 {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeoutCause(callCtx, cfg.wait, errWaitTimeout)
		defer cancel()
	}
	if blocking != nil {
		req.SkipHolder = false
		return c.acquireBlocking(ctx, waitCtx, blocking, cfg, req, held, down)
	}
	return c.acquirePolling(ctx, waitCtx, cfg, req, held, down)
}

// outage is a waiter's run of attempts that found the store unavailable
// (ErrUnavailable): the last error, and the backoff between attempts.
type outage struct {
	err     error
	backoff time.Duration
}

// storeDown records that an attempt found the store unavailable: it
// starts an outage, logged, or continues o, backing off further.
func (c *Client) storeDown(cfg *config, key string, err error, o *outage) *outage {
	if o == nil {
		cfg.logger.Warn("fence: store unavailable; waiting on", "key", key, "err", err)
		return &outage{err: err, backoff: minPoll}
	}
	o.err, o.backoff = err, min(o.backoff*2, maxPoll)
	return o
}

// sleepUntil is sleep with the wait ending at ctx's end or deadline,
// unless that is zero; it returns why the wait ended first, or nil.
func (o *outage) sleepUntil(ctx context.Context, deadline time.Time) error {
	wctx, cancel := ctx, context.CancelFunc(func() {})
	if !deadline.IsZero() {
		wctx, cancel = context.WithDeadlineCause(ctx, deadline, errWaitTimeout)
	}
	defer cancel()
	if o.sleep(wctx) {
		return nil
	}
	return context.Cause(wctx)
}

// sleep waits out one backoff step of the outage, jittered; false if the
// wait ended first.
func (o *outage) sleep(waitCtx context.Context) bool {
	t := time.NewTimer(rand.N(o.backoff/2+1) + o.backoff/2)
	defer t.Stop()
	select {
	case <-waitCtx.Done():
		return false
	case <-t.C:
		return true
	}
}

var errWaitTimeout = errors.New("fence: wait timeout")

// acquireBlocking waits inside a driver whose store queues waiters.
func (c *Client) acquireBlocking(ctx, waitCtx context.Context, b BlockingAcquirer, cfg *config, req Request, held *HeldError, down *outage) (*Lease, error) {
	for {
		if down != nil && !down.sleep(waitCtx) {
			return nil, c.waitEnded(ctx, waitCtx, req, held, down)
		}
		sent := time.Now()
		req.Owner, req.Meta = newOwnerID(cfg.ownerPrefix), holderMeta(cfg.meta, sent)
		claim, err := b.Acquire(waitCtx, req)
		if err != nil {
			if errors.Is(err, ErrUnavailable) {
				down = c.storeDown(cfg, req.Key, err, down)
				continue // the sleep ends the wait if it is over
			}
			if waitCtx.Err() != nil {
				// It ended inside the driver's wait: the store answered.
				return nil, c.waitEnded(ctx, waitCtx, req, held, nil)
			}
			return nil, c.acquireError(ctx, req.Key, err)
		}
		down = nil
		if time.Since(sent) >= cfg.renewInterval() {
			// A queued wait may outlast the TTL while the store keeps the
			// queue entry alive (its session). Validity measured from the
			// start of the wait would be over, or nearly, so the lease
			// would be dropped as late, or lost before its first renewal.
			// Confirm the grant with one compare-and-extend and measure
			// validity from that request instead.
			confirmed := time.Now()
			ectx, cancel := context.WithTimeout(ctx, cfg.ttl)
			err := claim.Extend(ectx, cfg.ttl)
			cancel()
			switch {
			case err == nil:
				sent = confirmed
			case errors.Is(err, ErrNotHeld):
				c.releaseQuietly(claim, cfg)
				continue
			}
		}
		l, err := c.grant(ctx, cfg, req, claim, sent)
		if errors.Is(err, errLateReply) {
			continue
		}
		return l, err
	}
}

// Polling bounds. A waiter sleeps at most maxPoll between attempts even
// when a store notification should wake it, as a guard against a missed
// notification.
const (
	minPoll = 5 * time.Millisecond
	maxPoll = time.Second
)

// acquirePolling retries TryAcquire, sleeping between attempts until a
// notification from a Watcher, the holder's reported expiry, or a jittered
// exponential backoff. held is what the first attempt found, nil if its
// reply came too late.
func (c *Client) acquirePolling(ctx, waitCtx context.Context, cfg *config, req Request, held *HeldError, down *outage) (*Lease, error) {
	var (
		notify  <-chan struct{}
		watched bool
		backoff = minPoll
		timer   = time.NewTimer(time.Hour)
	)
	timer.Stop()
	defer timer.Stop()
	watchCtx, stopWatch := context.WithCancel(waitCtx)
	defer stopWatch()

	for {
		// Subscribe once, then try again at once: a release between the
		// failed attempt and the subscription would otherwise go unseen.
		if down != nil {
			if !down.sleep(waitCtx) {
				return nil, c.waitEnded(ctx, waitCtx, req, held, down)
			}
		} else if w, ok := c.drv.(Watcher); ok && !watched {
			watched = true
			if ch, err := w.Watch(watchCtx, req.Key); err == nil {
				notify = ch
			} else {
				cfg.logger.Warn("fence: watch failed; polling instead", "key", req.Key, "err", err)
			}
		} else if held != nil {
			delay := backoff
			if notify != nil {
				delay = maxPoll
			}
			delay = rand.N(delay/2+1) + delay/2 // jitter: [delay/2, delay]
			if h := held.Holder; h != nil && h.ExpiresIn > 0 && h.ExpiresIn+time.Millisecond < delay {
				delay = h.ExpiresIn + time.Millisecond
			}
			timer.Reset(delay)
			select {
			case <-waitCtx.Done():
				return nil, c.waitEnded(ctx, waitCtx, req, held, nil)
			case _, ok := <-notify:
				if !ok {
					notify = nil // the watch broke: poll
				}
				backoff = minPoll
			case <-timer.C:
				backoff = min(backoff*2, maxPoll)
			}
			timer.Stop()
		}

		sent := time.Now()
		req.Owner, req.Meta = newOwnerID(cfg.ownerPrefix), holderMeta(cfg.meta, sent)
		claim, err := c.drv.TryAcquire(waitCtx, req)
		if err == nil {
			l, err := c.grant(ctx, cfg, req, claim, sent)
			if errors.Is(err, errLateReply) {
				held = nil
				continue
			}
			return l, err
		}
		var h *HeldError
		if !errors.As(err, &h) {
			if waitCtx.Err() != nil {
				// The wait ended inside an attempt, which tells nothing
				// new, even as ErrUnavailable (a driver that counts the
				// answers missing at its deadline, as Redlock's quorum
				// does, marks an attempt cut short so): the last answer
				// before it, held or an outage, is still the last word.
				return nil, c.waitEnded(ctx, waitCtx, req, held, down)
			}
			if errors.Is(err, ErrUnavailable) {
				down = c.storeDown(cfg, req.Key, err, down)
				continue // the sleep ends the wait if it is over
			}
			return nil, c.acquireError(ctx, req.Key, err)
		}
		held, down = h, nil
	}
}

// waitEnded returns the error for a wait that ended without the lease:
// ctx's error if the caller's context ended, a *HeldError if the wait
// timeout passed.
//
// If the store was unavailable at the last attempt (down), the error
// wraps both the end of the wait and ErrUnavailable with the store's
// last error: the key may well be free.
func (c *Client) waitEnded(ctx, waitCtx context.Context, req Request, held *HeldError, down *outage) error {
	key := req.Key
	if down != nil {
		end := context.Cause(ctx)
		if end == nil {
			end = context.Cause(waitCtx)
		}
		return fmt.Errorf("fence: acquire %q: %w, the store unavailable since: %w", key, end, down.err)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("fence: acquire %q: %w", key, context.Cause(ctx))
	}
	if context.Cause(waitCtx) != errWaitTimeout {
		return fmt.Errorf("fence: acquire %q: %w", key, context.Cause(waitCtx))
	}
	if held == nil || held.Holder == nil {
		held = &HeldError{Key: key}
		if req.Kind == KindLock {
			if h, err := c.Inspect(ctx, key); err == nil {
				held.Holder = &h
			}
		}
	}
	return held
}

func (c *Client) acquireError(ctx context.Context, key string, err error) error {
	var held *HeldError
	if errors.As(err, &held) {
		return err
	}
	if ctx.Err() != nil {
		return fmt.Errorf("fence: acquire %q: %w", key, context.Cause(ctx))
	}
	return fmt.Errorf("fence: acquire %q: %w", key, err)
}

var errLateReply = errors.New("fence: acquire reply arrived after the lease's validity ended")

// grant turns a driver's claim into a Lease, valid from the moment the
// request was sent. A reply that arrives after that validity has already
// ended is never reported as held: the claim is released and errLateReply
// returned.
func (c *Client) grant(ctx context.Context, cfg *config, req Request, claim Claim, sent time.Time) (*Lease, error) {
	validUntil := sent.Add(cfg.ttl - cfg.driftMargin())
	if tok := claim.Token(); tok <= 0 {
		c.releaseQuietly(claim, cfg)
		return nil, fmt.Errorf("fence: acquire %q: driver returned invalid token %d", req.Key, tok)
	}
	now := time.Now()
	if !now.Before(validUntil) {
		c.releaseQuietly(claim, cfg)
		cfg.logger.Warn("fence: acquire reply arrived after the lease's validity ended; not held",
			"key", req.Key, "token", claim.Token(), "elapsed", time.Since(sent))
		return nil, &LostError{Key: req.Key, Token: claim.Token(), Reason: LossExpired, Err: errLateReply}
	}
	l := newLease(c, cfg, req, claim, validUntil, now, ctx)
	if c.observer != nil {
		c.observer.LeaseGranted(ctx, LeaseGranted{Store: c.store, Key: l.key, Kind: req.Kind, Owner: l.owner,
			Token: l.token, TTL: cfg.ttl, AcquiredAt: now})
	}
	l.start(now)
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		_ = l.Release(context.WithoutCancel(ctx))
		return nil, fmt.Errorf("fence: acquire %q: %w", req.Key, ErrClosed)
	}
	// A session-bound lease may be lost already, its loss reported while
	// start registered for it; its lose then found nothing to forget.
	l.mu.Lock()
	if !l.ended {
		c.leases[l] = struct{}{}
	}
	l.mu.Unlock()
	c.mu.Unlock()
	return l, nil
}

func (c *Client) releaseQuietly(claim Claim, cfg *config) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.ttl)
	defer cancel()
	_ = claim.Release(ctx)
}

func (c *Client) forget(l *Lease) {
	c.mu.Lock()
	delete(c.leases, l)
	c.mu.Unlock()
}

// supports checks that the driver can acquire tgt's kind.
func (c *Client) supports(tgt target) error {
	if tgt.kind == KindSemaphore && tgt.limit < 1 {
		return fmt.Errorf("%w: semaphore %q with limit %d: the limit must be at least 1", ErrInvalidOption, tgt.key, tgt.limit)
	}
	if tgt.kind == KindLock {
		return nil
	}
	if ks, ok := c.drv.(KindSupporter); ok && ks.Supports(tgt.kind) {
		return nil
	}
	return fmt.Errorf("%w: %s on %q", ErrUnsupported, tgt.kind, tgt.key)
}

func (c *Client) checkOpen(key string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("fence: acquire %q: %w", key, ErrClosed)
	}
	return nil
}

// newOwnerID returns a unique, unguessable owner id: 128 random bits in
// hex, after prefix and a dash if a prefix is set.
func newOwnerID(prefix string) string {
	var b [16]byte
	r := ownerRand.Get().(*rand.ChaCha8)
	_, _ = r.Read(b[:]) // never fails
	ownerRand.Put(r)
	id := hex.EncodeToString(b[:])
	if prefix != "" {
		return prefix + "-" + id
	}
	return id
}

// ownerRand holds ChaCha8 generators (a cryptographically strong stream,
// per math/rand/v2) seeded from crypto/rand: as unguessable as reading
// crypto/rand for every id, at a fraction of the cost on the acquire
// path. A pool, so that concurrent acquisitions do not share one.
var ownerRand = sync.Pool{New: func() any {
	var seed [32]byte
	if _, err := cryptorand.Read(seed[:]); err != nil {
		panic("fence: crypto/rand failed: " + err.Error()) // never, per crypto/rand's docs
	}
	return rand.NewChaCha8(seed)
}}

var (
	hostname, _ = os.Hostname()
	pidString   = strconv.Itoa(os.Getpid())
)

// holderMeta returns the metadata of one acquisition attempt: the
// caller's, plus "host", "pid" and "acquired_at" (now, the attempt's
// start, RFC 3339, on this machine's clock: for people to read, never for
// validity) unless the caller set them.
func holderMeta(user map[string]string, now time.Time) map[string]string {
	m := make(map[string]string, len(user)+3)
	m["host"] = hostname
	m["pid"] = pidString
	m["acquired_at"] = now.UTC().Format(time.RFC3339Nano)
	for k, v := range user {
		m[k] = v
	}
	return m
}
