// Package fencedynamo is the fence driver for Amazon DynamoDB: a lease is
// one item per key, written only by conditional writes on its record
// version, and the fencing token is a counter in the item, bumped by the
// same conditional write that grants the lease.
//
// Each key has one item in the Store's table (made on the key's first
// acquisition; the table itself is made by CreateTable, or on first use
// with WithCreateTable). Its attributes are the key, the token counter,
// the holder's owner id, TTL and metadata, and a record version ("rv"),
// random and new with every write. An acquisition reads the item (one
// strongly consistent GetItem), then writes it once (one PutItem):
//
//   - absent: put it only if there is none (attribute_not_exists), with
//     the token seeded from the store's clock;
//   - free (released, or freed behind its holder's back): put it only if
//     its rv is still the one just read, with the counter bumped and the
//     new holder;
//   - held, and seen unchanged by this Store for the holder's full TTL:
//     the holder has stopped renewing and its lease is over; put it the
//     same way;
//   - held otherwise: the key is held; nothing is written.
//
// A renewal puts the item conditioned on the rv of the holder's last
// write (with the same token): a refusal means another wrote it since,
// which is loss. Release puts it the same way with the holder cleared and
// the counter kept. Items are never deleted: they are the counters. An
// item deleted anyway restarts its counter from the store's clock, above
// every token issued before (see docs/dynamodb.md for the one assumption).
//
// # Expiry without a server clock
//
// DynamoDB's condition expressions know no time of the server's, and the
// table keeps no expiry (its TTL feature deletes items late, by hours,
// and would take the counter with them): an item stays as its holder last
// wrote it whether or not the holder lives. A contender judges expiry on
// its own monotonic clock: every holder write (acquisition, renewal)
// changes the item's rv, so a Store that has seen the same rv on a held
// item for the holder's whole TTL, counted from the moment the read that
// first showed it came back, knows that the holder has not renewed for a
// TTL: its lease is over on the holder's own clock too (the holder counts
// its validity from before its write, minus a drift margin). The takeover
// is conditioned on that rv, so a renewal that lands in between wins.
// This is the record-version design of the DynamoDB lock client. The
// cost: a contender that comes to a key whose holder died waits up to a
// full TTL from its first look, even if the holder died long before;
// `fence status` from a fresh process cannot tell a dead holder from a
// live one (see docs/dynamodb.md).
//
// # Lock-delay
//
// A lease taken with a lock-delay (fence.WithLockDelay) carries it in the
// item (delayms). A contender then takes a held item only once it has
// seen it unchanged for the holder's TTL and the delay after it; until
// then Inspect and List show the lost holder, ExpiresIn the time until
// the key is free. The holder's claim refuses to renew or release once its
// TTL has passed since it sent its last write that landed: no contender
// can have judged the lease over before that, and after it a release
// would lift the delay. A release before it frees the key at once.
//
// DynamoDB has no notifications, so a waiting Acquire polls, one read per
// attempt, with the Client's jittered backoff.
//
// See docs/dynamodb.md for what the store guarantees, what it costs, and
// what it assumes (no global tables).
package fencedynamo

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/sighting"
	"github.com/fencing/fence/internal/kit/unavail"
)

// Store keeps leases as items of one table. It is safe for concurrent
// use. It remembers, for the held keys it has looked at, which record
// version it saw first when: that is how it tells an expired lease (see
// the package documentation).
type Store struct {
	db     *dynamodb.Client
	table  string
	create bool

	seen sighting.Book // by partition key: when this Store first saw each rv
}

var (
	_ fence.Driver      = (*Store)(nil)
	_ fence.Inspector   = (*Store)(nil)
	_ fence.Lister      = (*Store)(nil)
	_ fence.LockDelayer = (*Store)(nil)
)

// SupportsLockDelay implements fence.LockDelayer: the Store keeps the
// lock-delay of locks in their item.
func (s *Store) SupportsLockDelay(k fence.Kind) bool { return k == fence.KindLock }

// Option configures a Store.
type Option func(*Store)

// WithCreateTable makes the Store create its table (as CreateTable does)
// when a write finds it missing, and wait until it is active. Without it,
// a missing table is an error that says so. The credentials then need the
// right to create tables (dynamodb:CreateTable, dynamodb:DescribeTable).
func WithCreateTable() Option { return func(s *Store) { s.create = true } }

// New returns a Store that keeps its leases in the table named table,
// which must have a partition key "k" of type string and no sort key
// (CreateTable makes one). Dedicate the table to fence, and give the
// credentials the rights dynamodb:GetItem, dynamodb:PutItem and, for
// `fence list`, dynamodb:Scan on it.
//
// Build db with retries that suit leases (see docs/dynamodb.md); any
// client works. Do not point it at a global table (docs/dynamodb.md).
func New(db *dynamodb.Client, table string, opts ...Option) *Store {
	if db == nil {
		panic("fencedynamo: New with nil DynamoDB client")
	}
	if table == "" {
		panic("fencedynamo: New with an empty table name")
	}
	s := &Store{db: db, table: table}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Client returns the store's DynamoDB client.
func (s *Store) Client() *dynamodb.Client { return s.db }

// Table returns the name of the store's table.
func (s *Store) Table() string { return s.table }

// maxRaces bounds the lost races one TryAcquire retries. Each lost race
// means another writer changed the item: after a few, the key is reported
// held.
const maxRaces = 3

// settleTimeout bounds the requests that settle a write whose outcome is
// unknown, even when the caller's context is done.
var settleTimeout = 10 * time.Second

// Test hook: called after an acquisition reads the item, before it
// writes, to provoke the races the condition guards against.
var testHookRead func(key string)

// Test hook: judges expiry in place of watch, for the mutant tests that
// show the expiry tests can fail.
var testHookWatch func(b *sighting.Book, name string, it *item, ttl time.Duration, at time.Time) time.Duration

// Test hook: names a broken lock-delay mode (SetDelayMutant), for the
// mutant tests that show the lock-delay tests can fail.
var testHookDelay string

// read returns key's item and the store's clock as the response tells it;
// found false if there is no such item.
func (s *Store) read(ctx context.Context, key string) (it item, now time.Time, found bool, err error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      &s.table,
		Key:            map[string]types.AttributeValue{attrName: &types.AttributeValueMemberS{Value: PartitionKey(key)}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return item{}, now, false, err
	}
	if raw, ok := awsmiddleware.GetRawResponse(out.ResultMetadata).(*smithyhttp.Response); ok {
		now, err = serverDate(raw.Header)
	} else {
		err = fmt.Errorf("no HTTP answer to read the store's clock from")
	}
	if err != nil {
		return item{}, now, false, err
	}
	if out.Item == nil {
		return item{}, now, false, nil
	}
	it = parseItem(out.Item)
	if it.key != key {
		// Written by something other than fence, or a hash collision.
		return item{}, now, false, fmt.Errorf("item %s holds key %q, not this key", PartitionKey(key), it.key)
	}
	return it, now, true, nil
}

// watch records that a read that came back at at showed name's item it
// held at its version for ttl, and returns what is left of the lease as this
// Store can tell (sighting.Book.Left). A result <= 0 means the holder has
// written nothing for its full TTL: the lease is over.
func (s *Store) watch(name string, it *item, ttl time.Duration, at time.Time) time.Duration {
	if testHookWatch != nil {
		return testHookWatch(&s.seen, name, it, ttl, at)
	}
	return s.seen.Left(name, it.rv, ttl, at)
}

// watchHeld is watch for a held item: it returns what is left, as this
// Store can tell, of the key's block (the lease, then its lock-delay) and
// of the lease alone. blocked <= 0: the key is free; lease <= 0 < blocked:
// the lease is over, its lock-delay runs.
func (s *Store) watchHeld(name string, it *item, fallback time.Duration) (blocked, lease time.Duration) {
	blocked = s.watch(name, it, it.blockFor(fallback), time.Now())
	if testHookDelay == "resume-in-delay" {
		return blocked, blocked
	}
	return blocked, blocked - it.delay
}

// TryAcquire makes one attempt to take req.Key's item for req.Owner and
// issue the next token. See the package documentation for the steps.
// Its errors that say the service could not answer for now match
// fence.ErrUnavailable.
func (s *Store) TryAcquire(ctx context.Context, req fence.Request) (_ fence.Claim, err error) {
	defer func() { err = unavail.MarkLive(ctx, err, unavailable) }()
	op := "fencedynamo: acquire " + strconv.Quote(req.Key)
	name := PartitionKey(req.Key)
	// Fail on oversized holder metadata before sending anything.
	if _, err := checkMeta(req.Meta); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	for range maxRaces {
		cur, now, found, err := s.read(ctx, req.Key)
		if err != nil && !(s.create && missingTable(err)) {
			return nil, storageErr(op+": read", s.table, err)
		}
		if found && cur.held() {
			if left, _ := s.watchHeld(name, &cur, req.TTL); left > 0 {
				h := cur.holder(req.Key, left)
				return nil, &fence.HeldError{Key: req.Key, Holder: &h}
			}
		}
		if err != nil {
			// The table is missing, and the Store may make it.
			if err := s.CreateTable(ctx); err != nil {
				return nil, fmt.Errorf("%s: %w", op, err)
			}
			continue
		}
		want := item{key: req.Key, owner: req.Owner, ttl: ttlMillis(req.TTL), delay: delayMillis(req), meta: req.Meta, rv: newRV()}
		want.token, err = nextToken(cur.token, now)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		if testHookRead != nil {
			testHookRead(req.Key)
		}
		sent := time.Now()
		if found {
			err = s.put(ctx, &want, &cur)
		} else {
			err = s.put(ctx, &want, nil)
		}
		if err != nil && s.mine(ctx, &want) {
			if ctx.Err() != nil {
				// Landed, but the caller has given up: undo it.
				s.abandon(ctx, &want)
				return nil, fmt.Errorf("%s: %w", op, ctx.Err())
			}
			err = nil // the SDK retried a write that had landed
		}
		if err != nil {
			if conflict(err) {
				continue // changed (or made, or deleted) since the read
			}
			if !refused(err) {
				// The write may have landed: let go of a lease it took.
				s.abandon(ctx, &want)
			}
			return nil, storageErr(op+": write", s.table, err)
		}
		s.seen.Forget(name)
		return &claim{s: s, it: want, until: sent.Add(req.TTL)}, nil
	}
	// Every read was overtaken by another writer: the key is busy.
	return nil, &fence.HeldError{Key: req.Key}
}

// put writes it in place of the item prev as read (its record version
// unchanged), or, with prev nil, only if there is no item.
func (s *Store) put(ctx context.Context, it, prev *item) error {
	m, err := it.marshal()
	if err != nil {
		return err
	}
	in := &dynamodb.PutItemInput{TableName: &s.table, Item: m}
	switch {
	case prev == nil:
		in.ConditionExpression = aws.String("attribute_not_exists(#k)")
		in.ExpressionAttributeNames = map[string]string{"#k": attrName}
	case prev.rv == "":
		// Written by something other than fence: no version to match.
		in.ConditionExpression = aws.String("attribute_exists(#k) AND attribute_not_exists(#rv)")
		in.ExpressionAttributeNames = map[string]string{"#k": attrName, "#rv": attrRV}
	default:
		in.ConditionExpression = aws.String("#rv = :rv")
		in.ExpressionAttributeNames = map[string]string{"#rv": attrRV}
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":rv": &types.AttributeValueMemberS{Value: prev.rv}}
	}
	_, err = s.db.PutItem(ctx, in)
	return err
}

// mine reports whether the item now carries it's record version: whether
// a write of it whose answer was lost, or refused on a retry, had in fact
// landed. Only it's writer writes that version.
func (s *Store) mine(ctx context.Context, it *item) bool {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	cur, _, found, err := s.read(ctx, it.key)
	return err == nil && found && cur.rv == it.rv
}

// stillHeld reads it.key and reports whether the item names it.owner
// and token as its holder, with whatever record version it has now: a
// write of that holder's landed unseen.
func (s *Store) stillHeld(ctx context.Context, it *item) (item, bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	cur, _, found, err := s.read(ctx, it.key)
	ok := err == nil && found && cur.held() && cur.owner == it.owner && cur.token == it.token
	return cur, ok
}

// abandon frees the key if a write whose outcome is unknown made it its
// holder, even if ctx is done (a cancelled wait must leave nothing
// behind). If that fails too, the item looks held until contenders have
// watched it for its TTL.
func (s *Store) abandon(ctx context.Context, it *item) {
	if !s.mine(ctx, it) {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	free := item{key: it.key, token: it.token, ttl: it.ttl, released: it.owner, rv: newRV()}
	_ = s.put(ctx, &free, it)
}

// claim is one granted lease: the item as its holder last wrote it.
type claim struct {
	s        *Store
	it       item
	until    time.Time // the lease's end: the TTL from sending the last write that landed
	released bool
}

// ended returns an error matching fence.ErrNotHeld if the lease has a
// lock-delay and has ended: a renewal or a release now would cut the delay
// short for a contender that has watched the item for the TTL.
func (c *claim) ended(op string) error {
	if c.it.delay <= 0 || time.Now().Before(c.until) || testHookDelay == "release-after-end" {
		return nil
	}
	return fmt.Errorf("%s: %w: the lease ended; its lock-delay runs on", op, fence.ErrNotHeld)
}

func (c *claim) Token() int64 { return c.it.token }

// Extend writes the item again, with the new TTL and a new record
// version, only if it is still as this holder last wrote it: the new
// version restarts every contender's watch.
func (c *claim) Extend(ctx context.Context, ttl time.Duration) error {
	op := "fencedynamo: renew " + strconv.Quote(c.it.key)
	if c.released {
		return fmt.Errorf("%s: %w: released", op, fence.ErrNotHeld)
	}
	if err := c.ended(op); err != nil {
		return err
	}
	next := c.it
	next.ttl = ttlMillis(ttl)
	next.rv = newRV()
	return c.write(ctx, op, next, ttl)
}

// Release writes the item with the holder cleared (and the counter kept),
// only if it is still as this holder last wrote it.
func (c *claim) Release(ctx context.Context) error {
	op := "fencedynamo: release " + strconv.Quote(c.it.key)
	if c.released {
		return fmt.Errorf("%s: %w: released", op, fence.ErrNotHeld)
	}
	if err := c.ended(op); err != nil {
		return err
	}
	next := item{key: c.it.key, token: c.it.token, ttl: c.it.ttl, released: c.it.owner, rv: newRV()}
	err := c.write(ctx, op, next, 0)
	if err == nil {
		c.released = true
	}
	return err
}

// write puts next conditioned on the holder's last record version. A
// refusal (another wrote the item since, or deleted it) is
// fence.ErrNotHeld; other errors (5xx, throttling, the network) are
// returned as they are: the store may still hold the lease, and the
// Client retries.
//
// A write of this holder's whose answer was lost, and whose landing the
// read after it could not tell (the store unreachable for a while), may
// have landed all the same: the item then has a version this claim does
// not know, and the next write is refused. Before calling that loss,
// write reads the item once: if it still names this holder's owner and
// token, nobody else wrote it (owner ids are unique to one acquisition),
// so the claim takes its version and writes again. The Client counted no
// validity from the write it could not confirm, so nothing is trusted
// that the holder did not see.
//
// A write that lands moves the lease's end to ttl from its sending.
func (c *claim) write(ctx context.Context, op string, next item, ttl time.Duration) error {
	sent := time.Now()
	err := c.s.put(ctx, &next, &c.it)
	if err != nil && c.s.mine(ctx, &next) {
		err = nil // the SDK retried a write that had landed
	}
	if err != nil && conflict(err) {
		if cur, ok := c.s.stillHeld(ctx, &c.it); ok {
			c.it = cur
			err = c.s.put(ctx, &next, &c.it)
			if err != nil && c.s.mine(ctx, &next) {
				err = nil
			}
		}
	}
	if err != nil {
		if conflict(err) {
			return notHeldErr(op, c.s.table, err)
		}
		return storageErr(op, c.s.table, err)
	}
	c.it, c.until = next, sent.Add(ttl)
	return nil
}

var (
	_ fence.Breaker = (*Store)(nil)
	_ fence.Resumer = (*Store)(nil)
)

// Break implements fence.Breaker: it frees key at once, behind its
// holder's back, only if the item's holder has token (any, for 0): the
// item is put with the holder cleared and the counter kept, conditioned
// on the record version it was read with, so a write since (the
// holder's renewal, a new holder) makes Break look again. The holder's
// next renewal is refused and its lease lost; tokens go on growing. The
// conformance suite's forced loss uses it with token 0. Its errors that
// say the service could not answer for now match fence.ErrUnavailable,
// as TryAcquire's.
func (s *Store) Break(ctx context.Context, key string, token int64) (_ fence.Holder, err error) {
	defer func() { err = unavail.MarkLive(ctx, err, unavailable) }()
	if err := fence.ValidateKey(key); err != nil {
		return fence.Holder{}, err
	}
	op := "fencedynamo: break " + strconv.Quote(key)
	name := PartitionKey(key)
	for range maxRaces {
		cur, _, found, err := s.read(ctx, key)
		if err != nil {
			return fence.Holder{}, storageErr(op, s.table, err)
		}
		if !found || !cur.held() {
			return fence.Holder{}, fmt.Errorf("%s: %w", op, fence.ErrNotHeld)
		}
		left, _ := s.watchHeld(name, &cur, fence.DefaultTTL)
		h := cur.holder(key, left)
		if token != 0 && cur.token != token {
			return fence.Holder{}, &fence.HeldError{Key: key, Holder: &h}
		}
		free := item{key: key, token: cur.token, ttl: cur.ttl, rv: newRV()}
		if err := s.put(ctx, &free, &cur); err != nil {
			if conflict(err) {
				continue // written since the read: look again
			}
			return fence.Holder{}, storageErr(op, s.table, err)
		}
		s.seen.Forget(name)
		return h, nil
	}
	return fence.Holder{}, fmt.Errorf("%s: the item keeps changing under the break", op)
}

// Resume implements fence.Resumer: it renews key's item, with the new TTL
// and metadata and the same token, only if it names req.Owner with tok
// and this Store has not seen it unchanged for its holder's TTL,
// conditioned on the record version it was read with. Its errors that
// say the service could not answer for now match fence.ErrUnavailable.
func (s *Store) Resume(ctx context.Context, req fence.Request, tok int64) (_ fence.Claim, err error) {
	defer func() { err = unavail.MarkLive(ctx, err, unavailable) }()
	if req.Kind != fence.KindLock {
		return nil, fmt.Errorf("fencedynamo: resume %q: %w: %s", req.Key, fence.ErrUnsupported, req.Kind)
	}
	op := "fencedynamo: resume " + strconv.Quote(req.Key)
	name := PartitionKey(req.Key)
	if _, err := checkMeta(req.Meta); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	for range maxRaces {
		cur, _, found, err := s.read(ctx, req.Key)
		if err != nil {
			return nil, storageErr(op, s.table, err)
		}
		if !found || !cur.held() {
			return nil, fmt.Errorf("%s: %w", op, fence.ErrNotHeld)
		}
		left, lease := s.watchHeld(name, &cur, req.TTL)
		if lease <= 0 {
			return nil, fmt.Errorf("%s: %w: its holder has not renewed for its TTL", op, fence.ErrNotHeld)
		}
		if cur.owner != req.Owner || cur.token != tok {
			h := cur.holder(req.Key, left)
			return nil, &fence.HeldError{Key: req.Key, Holder: &h}
		}
		// The lease keeps its lock-delay: a resume may lengthen it, never
		// drop it.
		want := item{key: req.Key, owner: req.Owner, token: tok, ttl: ttlMillis(req.TTL), delay: max(delayMillis(req), cur.delay),
			meta: req.Meta, rv: newRV()}
		sent := time.Now()
		err = s.put(ctx, &want, &cur)
		if err != nil && s.mine(ctx, &want) {
			err = nil // the SDK retried a write that had landed
		}
		if err != nil {
			if conflict(err) {
				continue
			}
			return nil, storageErr(op, s.table, err)
		}
		s.seen.Forget(name)
		return &claim{s: s, it: want, until: sent.Add(req.TTL)}, nil
	}
	return nil, fmt.Errorf("%s: the item keeps changing under the resume", op)
}
