// Package fenceaztable is the fence driver for Azure Table storage, and
// for the Table API of Azure Cosmos DB, which speaks the same protocol: a
// lease is one entity per key, written only with optimistic concurrency
// on its ETag, and the fencing token is a counter in the entity, bumped
// by the same conditional write that grants the lease.
//
// Each key has one entity in the Store's table (the table is created if
// missing; the entity on the key's first acquisition). Its properties are
// the key, the token counter, the holder's owner id, TTL and metadata. An
// acquisition reads the entity (one request), then writes it once:
//
//   - absent: insert it (the service refuses an insert over an existing
//     entity), with the token seeded from the store's clock;
//   - free (released, or freed behind its holder's back): replace it, only
//     if its ETag is still the one just read (If-Match), with the counter
//     bumped and the new holder;
//   - held, and seen unchanged by this Store for the holder's full TTL:
//     the holder has stopped renewing and its lease is over; replace it
//     the same way;
//   - held otherwise: the key is held; nothing is written.
//
// A renewal replaces the entity If-Match on the ETag of the holder's last
// write (with the same token): a refusal means another wrote it since,
// which is loss. Release replaces it the same way with the holder cleared
// and the counter kept. Entities are never deleted: they are the
// counters. An entity deleted anyway restarts its counter from the store's
// clock, above every token issued before (see docs/aztable.md for the one
// assumption).
//
// # Expiry without trusting a clock
//
// The table keeps no expiry: an entity stays as its holder last wrote it
// whether or not the holder lives. A contender judges expiry on its own
// monotonic clock: every holder write (acquisition, renewal) changes the
// entity's ETag, so a Store that has seen the same ETag on a held entity
// for the holder's whole TTL, counted from the moment the read that first
// showed it came back, knows that the holder has not renewed for a TTL:
// its lease is over on the holder's own clock too (the holder counts its
// validity from before its write, minus a drift margin). The takeover is
// If-Match on that ETag, so a renewal that lands in between wins. This is
// the record-version design of the DynamoDB lock client and of
// client-go's leader election. The entity's Timestamp (the time of its
// last write, by the service's clock) is not used: comparing it with the
// Date of a response compares two servers' clocks, and on Cosmos DB the
// two come from different machines. The cost: a contender that comes to a
// key whose holder died waits up to a full TTL from its first look, even
// if the holder died long before; `fence status` from a fresh process
// cannot tell a dead holder from a live one (see docs/aztable.md).
//
// # Lock-delay
//
// A lease taken with a lock-delay (fence.WithLockDelay) carries it in the
// entity (DelayMs). A contender then takes a held entity only once it has
// seen it unchanged for the holder's TTL and the delay after it; until
// then Inspect and List show the lost holder, ExpiresIn the time until
// the key is free. The holder's claim refuses to renew or release once its
// TTL has passed since it sent its last write that landed: no contender
// can have judged the lease over before that, and after it a release
// would lift the delay. A release before it frees the key at once.
//
// The Table service has no notifications, so a waiting Acquire polls, one
// read per attempt, with the Client's jittered backoff.
//
// See docs/aztable.md for what the store guarantees, what it costs, and
// what differs on Cosmos DB and on Azurite, the emulator the tests run on.
package fenceaztable

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/azkit"
	"github.com/fencing/fence/internal/kit/sighting"
	"github.com/fencing/fence/internal/kit/unavail"
)

// Store keeps leases as entities of one table. It is safe for concurrent
// use. It remembers, for the held keys it has looked at, which ETag it
// saw first when: that is how it tells an expired lease (see the package
// documentation).
type Store struct {
	t *aztables.Client

	seen sighting.Book // by PartitionKey: when this Store first saw each ETag
}

var (
	_ fence.Driver      = (*Store)(nil)
	_ fence.Inspector   = (*Store)(nil)
	_ fence.Lister      = (*Store)(nil)
	_ fence.LockDelayer = (*Store)(nil)
)

// SupportsLockDelay implements fence.LockDelayer: the Store keeps the
// lock-delay of locks in their entity.
func (s *Store) SupportsLockDelay(k fence.Kind) bool { return k == fence.KindLock }

// New returns a Store that keeps its leases in the table t names, created
// on first use if it does not exist. Dedicate the table to fence, and give
// the credential rights to read, add and update entities (and to create
// the table, if it is to be created).
//
// Build t with ClientOptions for retries that suit leases; any
// aztables.Client works.
func New(t *aztables.Client) *Store {
	if t == nil {
		panic("fenceaztable: New with nil table client")
	}
	return &Store{t: t}
}

// Table returns the store's table client.
func (s *Store) Table() *aztables.Client { return s.t }

// ClientOptions returns table client options suited to leases: few, quick
// retries of a failed request (the Client retries renewals itself, within
// the lease's validity) and a per-try timeout of a few seconds. The SDK's
// defaults retry for up to minutes.
func ClientOptions() *aztables.ClientOptions {
	return &aztables.ClientOptions{ClientOptions: azcore.ClientOptions{
		Retry: policy.RetryOptions{
			MaxRetries:    2,
			TryTimeout:    5 * time.Second,
			RetryDelay:    100 * time.Millisecond,
			MaxRetryDelay: time.Second,
		},
	}}
}

// maxRaces bounds the lost races one TryAcquire retries. Each lost race
// means another writer changed the entity: after a few, the key is
// reported held.
const maxRaces = 3

// settleTimeout bounds the requests that settle a write whose outcome is
// unknown, even when the caller's context is done.
var settleTimeout = 10 * time.Second

// Test hook: called after an acquisition reads the entity, before it
// writes, to provoke the races the If-Match guards against.
var testHookRead func(key string)

// Test hook: names a broken lock-delay mode (SetDelayMutant), for the
// mutant tests that show the lock-delay tests can fail.
var testHookDelay string

// read returns key's entity, its ETag and the store's clock as the
// response tells it; found false if there is no such entity (or table).
func (s *Store) read(ctx context.Context, key string) (e entity, etag azcore.ETag, now *time.Time, found bool, err error) {
	var resp *http.Response
	r, err := s.t.GetEntity(policy.WithCaptureResponse(ctx, &resp), PartitionKey(key), rowKey, nil)
	now = serverDate(resp)
	if azkit.Status(err) == http.StatusNotFound {
		return entity{}, "", now, false, nil
	}
	if err != nil {
		return entity{}, "", now, false, err
	}
	e, err = parseEntity(r.Value)
	if err != nil {
		return entity{}, "", now, false, err
	}
	if e.key != key {
		// Written by something other than fence, or a hash collision.
		return entity{}, "", now, false, fmt.Errorf("entity %s holds key %q, not this key", PartitionKey(key), e.key)
	}
	return e, r.ETag, now, true, nil
}

// watch records that a read that came back at at showed key's entity held
// at etag for ttl, and returns what is left of the lease as this Store
// can tell (sighting.Book.Left). A result <= 0 means the holder has
// written nothing for its full TTL: the lease is over.
func (s *Store) watch(name string, etag azcore.ETag, ttl time.Duration, at time.Time) time.Duration {
	return s.seen.Left(name, string(etag), ttl, at)
}

// forget drops what the Store saw of name's entity.
func (s *Store) forget(name string) { s.seen.Forget(name) }

// watchHeld is watch for a held entity e: it returns what is left, as this
// Store can tell, of the key's block (the lease, then its lock-delay) and
// of the lease alone. blocked <= 0: the key is free; lease <= 0 < blocked:
// the lease is over, its lock-delay runs.
func (s *Store) watchHeld(name string, e *entity, etag azcore.ETag, fallback time.Duration) (blocked, lease time.Duration) {
	blocked = s.watch(name, etag, e.blockFor(fallback), time.Now())
	if testHookDelay == "resume-in-delay" {
		return blocked, blocked
	}
	return blocked, blocked - e.delay
}

// TryAcquire makes one attempt to take req.Key's entity for req.Owner and
// issue the next token. See the package documentation for the steps.
// Its errors that say the service could not answer for now match
// fence.ErrUnavailable.
func (s *Store) TryAcquire(ctx context.Context, req fence.Request) (_ fence.Claim, err error) {
	defer func() { err = unavail.Mark(err, azkit.Unavailable) }()
	op := "fenceaztable: acquire " + strconv.Quote(req.Key)
	name := PartitionKey(req.Key)
	want := entity{key: req.Key, owner: req.Owner, ttl: ttlMillis(req.TTL), delay: delayMillis(req), meta: req.Meta}
	// Fail on oversized holder metadata before sending anything.
	if _, err := want.marshal(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	for range maxRaces {
		cur, etag, now, found, err := s.read(ctx, req.Key)
		if err != nil {
			return nil, azkit.Err(op+": read", err)
		}
		if found && cur.held() {
			if left, _ := s.watchHeld(name, &cur, etag, req.TTL); left > 0 {
				h := cur.holder(req.Key, left)
				return nil, &fence.HeldError{Key: req.Key, Holder: &h}
			}
		}
		want.token, err = nextToken(cur.token, now)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		if testHookRead != nil {
			testHookRead(req.Key)
		}
		var tag azcore.ETag
		sent := time.Now()
		if found {
			tag, err = s.replace(ctx, &want, etag)
		} else {
			tag, err = s.insert(ctx, &want)
		}
		if err != nil {
			if t, ok := s.mine(ctx, &want); ok {
				if ctx.Err() != nil {
					// Landed, but the caller has given up: undo it.
					s.abandon(ctx, &want)
					return nil, fmt.Errorf("%s: %w", op, ctx.Err())
				}
				tag, err = t, nil // the SDK retried a write that had landed
			}
		}
		if err != nil {
			if azkit.Conflict(err) {
				continue // changed (or made, or deleted) since the read
			}
			if !azkit.Refused(err) {
				// The write may have landed: let go of a lease it took.
				s.abandon(ctx, &want)
			}
			return nil, azkit.Err(op+": write", err)
		}
		s.forget(name)
		return &claim{s: s, e: want, etag: tag, until: sent.Add(req.TTL)}, nil
	}
	// Every read was overtaken by another writer: the key is busy.
	return nil, &fence.HeldError{Key: req.Key}
}

// insert adds e's entity, which must not exist yet, creating the table if
// it is missing.
func (s *Store) insert(ctx context.Context, e *entity) (azcore.ETag, error) {
	e.write = newWriteID()
	b, err := e.marshal()
	if err != nil {
		return "", err
	}
	r, err := s.t.AddEntity(ctx, b, nil)
	if azkit.Code(err) == string(aztables.TableNotFound) {
		_, err = s.t.CreateTable(ctx, nil)
		if err != nil && azkit.Code(err) != string(aztables.TableAlreadyExists) {
			return "", err
		}
		r, err = s.t.AddEntity(ctx, b, nil)
	}
	if err != nil {
		return "", err
	}
	return r.ETag, nil
}

// replace writes e's entity in place of the one whose ETag is etag.
func (s *Store) replace(ctx context.Context, e *entity, etag azcore.ETag) (azcore.ETag, error) {
	e.write = newWriteID()
	b, err := e.marshal()
	if err != nil {
		return "", err
	}
	r, err := s.t.UpdateEntity(ctx, b, &aztables.UpdateEntityOptions{IfMatch: &etag, UpdateMode: aztables.UpdateModeReplace})
	if err != nil {
		return "", err
	}
	return r.ETag, nil
}

// mine reports whether the entity is now e as written (its Write id,
// new with every write), with its ETag: whether a write of e whose answer
// was lost, or refused on a retry, had in fact landed.
func (s *Store) mine(ctx context.Context, e *entity) (azcore.ETag, bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	cur, etag, _, found, err := s.read(ctx, e.key)
	if err != nil || !found {
		return "", false
	}
	return etag, e.write != "" && cur.write == e.write
}

// stillHeld reports whether the entity still names e's owner and token as
// its holder, with its ETag now: a write of that holder's landed unseen.
func (s *Store) stillHeld(ctx context.Context, e *entity) (azcore.ETag, bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	cur, etag, _, found, err := s.read(ctx, e.key)
	if err != nil || !found {
		return "", false
	}
	return etag, cur.held() && cur.owner == e.owner && cur.token == e.token
}

// newWriteID returns a random id for one write.
func newWriteID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// abandon frees the key if a write whose outcome is unknown made e its
// holder, even if ctx is done (a cancelled wait must leave nothing
// behind). If that fails too, the entity looks held until contenders have
// watched it for its TTL.
func (s *Store) abandon(ctx context.Context, e *entity) {
	etag, ok := s.mine(ctx, e)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	free := entity{key: e.key, token: e.token, ttl: e.ttl, released: e.owner}
	_, _ = s.replace(ctx, &free, etag)
}

// claim is one granted lease: the entity as its holder last wrote it.
type claim struct {
	s        *Store
	e        entity
	etag     azcore.ETag
	until    time.Time // the lease's end: the TTL from sending the last write that landed
	released bool
}

// ended returns an error matching fence.ErrNotHeld if the lease has a
// lock-delay and has ended: a renewal or a release now would cut the delay
// short for a contender that has watched the entity for the TTL.
func (c *claim) ended(op string) error {
	if c.e.delay <= 0 || time.Now().Before(c.until) || testHookDelay == "release-after-end" {
		return nil
	}
	return fmt.Errorf("%s: %w: the lease ended; its lock-delay runs on", op, fence.ErrNotHeld)
}

func (c *claim) Token() int64 { return c.e.token }

// Extend writes the entity again, with the new TTL, only if it is still
// as this holder last wrote it: the new ETag restarts every contender's
// watch.
func (c *claim) Extend(ctx context.Context, ttl time.Duration) error {
	op := "fenceaztable: renew " + strconv.Quote(c.e.key)
	if c.released {
		return fmt.Errorf("%s: %w: released", op, fence.ErrNotHeld)
	}
	if err := c.ended(op); err != nil {
		return err
	}
	next := c.e
	next.ttl = ttlMillis(ttl)
	return c.write(ctx, op, next, ttl)
}

// Release writes the entity with the holder cleared (and the counter
// kept), only if it is still as this holder last wrote it.
func (c *claim) Release(ctx context.Context) error {
	op := "fenceaztable: release " + strconv.Quote(c.e.key)
	if c.released {
		return fmt.Errorf("%s: %w: released", op, fence.ErrNotHeld)
	}
	if err := c.ended(op); err != nil {
		return err
	}
	next := entity{key: c.e.key, token: c.e.token, ttl: c.e.ttl, released: c.e.owner}
	err := c.write(ctx, op, next, 0)
	if err == nil {
		c.released = true
	}
	return err
}

// write replaces the entity with next If-Match on the holder's last ETag.
// A refusal (another wrote the entity since, or deleted it) is
// fence.ErrNotHeld; other errors (5xx, the network) are returned as they
// are: the store may still hold the lease, and the Client retries.
//
// A write of this holder's whose answer was lost, and whose landing the
// read after it could not tell (the service unreachable for a while), may
// have landed all the same: the entity then has an ETag this claim does
// not know, and the next write is refused. Before calling that loss,
// write reads the entity once: if it still names this holder's owner and
// token, nobody else wrote it (owner ids are unique to one acquisition),
// so the claim takes its ETag and writes again. The Client counted no
// validity from the write it could not confirm.
//
// A write that lands moves the lease's end to ttl from its sending.
func (c *claim) write(ctx context.Context, op string, next entity, ttl time.Duration) error {
	sent := time.Now()
	tag, err := c.s.replace(ctx, &next, c.etag)
	if err != nil {
		if t, ok := c.s.mine(ctx, &next); ok {
			tag, err = t, nil // the SDK retried a write that had landed
		}
	}
	if err != nil && azkit.Conflict(err) {
		if t, ok := c.s.stillHeld(ctx, &c.e); ok {
			c.etag = t
			tag, err = c.s.replace(ctx, &next, c.etag)
			if err != nil {
				if t, ok := c.s.mine(ctx, &next); ok {
					tag, err = t, nil
				}
			}
		}
	}
	if err != nil {
		if azkit.Conflict(err) {
			return azkit.NotHeld(op, err)
		}
		return azkit.Err(op, err)
	}
	c.e, c.etag, c.until = next, tag, sent.Add(ttl)
	return nil
}

var (
	_ fence.Breaker = (*Store)(nil)
	_ fence.Resumer = (*Store)(nil)
)

// Break implements fence.Breaker: it frees key at once, behind its
// holder's back, only if the entity's holder has token (any, for 0): the
// entity is replaced, holder cleared and counter kept, If-Match on the
// ETag it was read with, so a write since (the holder's renewal, a new
// holder) makes Break look again. The holder's next renewal is refused
// and its lease lost; tokens go on growing. The conformance suite's
// forced loss uses it with token 0.
func (s *Store) Break(ctx context.Context, key string, token int64) (fence.Holder, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Holder{}, err
	}
	op := "fenceaztable: break " + strconv.Quote(key)
	for range maxRaces {
		cur, etag, _, found, err := s.read(ctx, key)
		if err != nil {
			return fence.Holder{}, azkit.Err(op, err)
		}
		if !found || !cur.held() {
			return fence.Holder{}, fmt.Errorf("%s: %w", op, fence.ErrNotHeld)
		}
		left, _ := s.watchHeld(PartitionKey(key), &cur, etag, fence.DefaultTTL)
		h := cur.holder(key, left)
		if token != 0 && cur.token != token {
			return fence.Holder{}, &fence.HeldError{Key: key, Holder: &h}
		}
		free := entity{key: key, token: cur.token, ttl: cur.ttl}
		if _, err := s.replace(ctx, &free, etag); err != nil {
			if azkit.Conflict(err) {
				continue // written since the read: look again
			}
			return fence.Holder{}, azkit.Err(op, err)
		}
		s.forget(PartitionKey(key))
		return h, nil
	}
	return fence.Holder{}, fmt.Errorf("%s: the entity keeps changing under the break", op)
}

// Resume implements fence.Resumer: it renews key's entity, with the new
// TTL and metadata, only if it names req.Owner with tok and this Store
// has not seen it unchanged for its holder's TTL, If-Match on the ETag it
// was read with. Its errors that say the service could not answer for
// now match fence.ErrUnavailable, as TryAcquire's.
func (s *Store) Resume(ctx context.Context, req fence.Request, tok int64) (_ fence.Claim, err error) {
	defer func() { err = unavail.Mark(err, azkit.Unavailable) }()
	if req.Kind != fence.KindLock {
		return nil, fmt.Errorf("fenceaztable: resume %q: %w: %s", req.Key, fence.ErrUnsupported, req.Kind)
	}
	op := "fenceaztable: resume " + strconv.Quote(req.Key)
	want := entity{key: req.Key, owner: req.Owner, token: tok, ttl: ttlMillis(req.TTL), delay: delayMillis(req), meta: req.Meta}
	if _, err := want.marshal(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	for range maxRaces {
		cur, etag, _, found, err := s.read(ctx, req.Key)
		if err != nil {
			return nil, azkit.Err(op, err)
		}
		if !found || !cur.held() {
			return nil, fmt.Errorf("%s: %w", op, fence.ErrNotHeld)
		}
		left, lease := s.watchHeld(PartitionKey(req.Key), &cur, etag, req.TTL)
		if lease <= 0 {
			return nil, fmt.Errorf("%s: %w: its holder has not renewed for its TTL", op, fence.ErrNotHeld)
		}
		if cur.owner != req.Owner || cur.token != tok {
			h := cur.holder(req.Key, left)
			return nil, &fence.HeldError{Key: req.Key, Holder: &h}
		}
		// The lease keeps its lock-delay: a resume may lengthen it, never
		// drop it.
		want.delay = max(delayMillis(req), cur.delay)
		sent := time.Now()
		tag, err := s.replace(ctx, &want, etag)
		if err != nil {
			if azkit.Conflict(err) {
				continue
			}
			return nil, azkit.Err(op, err)
		}
		s.forget(PartitionKey(req.Key))
		return &claim{s: s, e: want, etag: tag, until: sent.Add(req.TTL)}, nil
	}
	return nil, fmt.Errorf("%s: the entity keeps changing under the resume", op)
}
