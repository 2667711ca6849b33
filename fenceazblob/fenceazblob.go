// Package fenceazblob is the fence driver for Azure Blob Storage: a lease
// is an Azure blob lease, the primitive Azure's own libraries use for
// leader election, and the fencing token it lacks is a counter kept in the
// blob's metadata.
//
// Each key has one block blob in the Store's container (the container is
// created if missing; the blob on a key's first acquisition). An
// acquisition takes three requests on the uncontended path:
//
//  1. read the blob's properties: its lease state, its ETag and its
//     metadata, which holds the key's token counter and the last holder;
//  2. acquire a blob lease, proposing the lease ID LeaseID(owner), only
//     if the blob's ETag is still the one just read (If-Match), so that no
//     other acquisition has bumped the counter in between;
//  3. write the new counter (and the holder) into the metadata, under the
//     new lease and again only if the ETag is unchanged.
//
// Only then is the lease granted, with the new counter as its token. Every
// acquisition bumps the counter under its own lease with a write that
// fails if anything changed since the counter was read, so every token is
// strictly greater than every token issued before for the key, whatever
// happened in between: releases, expiries, broken leases. A lost race (a
// lease refused because the blob changed since the read, a token write
// refused because the new lease was broken and taken in between) leads to
// a new read, at most three times within the one attempt, and never to a
// duplicate token. If the token write fails otherwise (the network, a
// cancelled context), the lease is released again and the attempt fails:
// nothing is left behind. Blobs are never deleted:
// they are the counters. A blob that is deleted anyway (by an operator, a
// lifecycle rule) restarts its counter from the store's clock, above every
// token issued before (see docs/azblob.md for the one assumption).
//
// A key held by another owner costs one request: the properties read
// shows the lease, and the *fence.HeldError carries the holder from the
// metadata (owner, token, metadata; ExpiresIn is the lease duration, an
// upper bound, since the service does not tell a lease's remaining time).
// Blob leases have no notifications, so a waiting Acquire polls: one
// request per attempt, with the Client's jittered backoff: once it has
// grown, one or two requests a second per waiter.
//
// Leases last 15 to 60 seconds, Azure's range for a fixed-duration lease:
// a TTL is rounded up to whole seconds, and a TTL outside the range is
// refused with an error matching fence.ErrInvalidTTL, before anything is
// sent. A renewal (every TTL/3) renews the blob lease; the service refusing
// it (the lease was broken, expired and taken, or released) is loss, as is
// an operator breaking the lease: the holder learns it at its next
// renewal. Release releases the lease by its ID, so it can only ever
// release the holder's own lease.
//
// See docs/azblob.md for what the store guarantees, what it costs, and
// what differs on Azurite, the emulator the tests run on.
package fenceazblob

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/streaming"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/azkit"
	"github.com/fencing/fence/internal/kit/unavail"
)

// The range of a fixed-duration Azure blob lease.
const (
	MinTTL = 15 * time.Second
	MaxTTL = 60 * time.Second
)

// Store keeps leases as blob leases in one container. It is safe for
// concurrent use and holds nothing that needs closing beyond its
// container client.
type Store struct {
	c *container.Client
}

var (
	_ fence.Driver    = (*Store)(nil)
	_ fence.Inspector = (*Store)(nil)
	_ fence.Lister    = (*Store)(nil)
)

// New returns a Store that keeps its leases in the container c names,
// created on first use if it does not exist. Dedicate the container to
// fence (or at least the blob names starting with "key/" and "hash/"),
// and give the credential read, write and create rights on blobs (and on
// the container, if it is to be created).
//
// Build c with ClientOptions for retries that suit leases; any
// container.Client works.
func New(c *container.Client) *Store {
	if c == nil {
		panic("fenceazblob: New with nil container client")
	}
	return &Store{c: c}
}

// Container returns the store's container client.
func (s *Store) Container() *container.Client { return s.c }

// ClientOptions returns container client options suited to leases: few,
// quick retries of a failed request (the Client retries renewals itself,
// within the lease's validity) and a per-try timeout well below the
// shortest lease. The SDK's defaults retry for up to minutes.
func ClientOptions() *container.ClientOptions {
	return &container.ClientOptions{ClientOptions: azcore.ClientOptions{
		Retry: policy.RetryOptions{
			MaxRetries:    2,
			TryTimeout:    10 * time.Second,
			RetryDelay:    100 * time.Millisecond,
			MaxRetryDelay: time.Second,
		},
	}}
}

// leaseSeconds returns the duration of the blob lease for ttl: ttl rounded
// up to whole seconds, so the store never keeps a lease for less than the
// Client counts on; an error matching fence.ErrInvalidTTL outside Azure's
// range.
func leaseSeconds(ttl time.Duration) (int32, error) {
	secs := (ttl + time.Second - 1) / time.Second
	if ttl <= 0 || secs < MinTTL/time.Second || secs > MaxTTL/time.Second {
		return 0, fmt.Errorf("%w: %v: Azure blob leases last %v to %v (whole seconds; a TTL is rounded up)",
			fence.ErrInvalidTTL, ttl, MinTTL, MaxTTL)
	}
	return int32(secs), nil
}

// maxRaces bounds the lost races one TryAcquire retries. Each lost race
// means another acquisition changed the blob: after a few, the key is
// reported held.
const maxRaces = 3

// abandonTimeout bounds the release of a lease an attempt took but cannot
// grant.
const abandonTimeout = 10 * time.Second

// Test hooks: called between the steps of an acquisition, to provoke the
// races the steps guard against.
var (
	testHookRead   func(key string) // after the properties are read
	testHookLeased func(key string) // after the lease is taken
)

// TryAcquire makes one attempt to lease req.Key's blob for req.Owner and
// issue the next token. See the package documentation for the steps.
// Its errors that say the service could not answer for now match
// fence.ErrUnavailable.
func (s *Store) TryAcquire(ctx context.Context, req fence.Request) (_ fence.Claim, err error) {
	defer func() { err = unavail.Mark(err, azkit.Unavailable) }()
	op := "fenceazblob: acquire " + strconv.Quote(req.Key)
	dur, err := leaseSeconds(req.TTL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	// Fail on oversized holder metadata before sending anything.
	if _, err := holderMetadata(req.Key, req.Owner, 1<<63-1, dur, req.Meta); err != nil {
		return nil, err
	}
	name := BlobName(req.Key)
	b := s.c.NewBlobClient(name)
	id := LeaseID(req.Owner)
	lc, err := lease.NewBlobClient(b, &lease.BlobClientOptions{LeaseID: &id})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}

	for range maxRaces {
		props, err := b.GetProperties(ctx, nil)
		if bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
			if err := s.create(ctx, req.Key, name); err != nil {
				return nil, err
			}
			continue
		}
		if err != nil {
			return nil, azkit.Err(op+": read", err)
		}
		if held(props.LeaseState) {
			h := holderFrom(req.Key, props.Metadata, props.LeaseState)
			return nil, &fence.HeldError{Key: req.Key, Holder: &h}
		}
		token, err := nextToken(props.Metadata, serverTime(props.Date, props.LastModified))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
		if testHookRead != nil {
			testHookRead(req.Key)
		}

		acq, err := lc.AcquireLease(ctx, dur, &lease.BlobAcquireOptions{
			ModifiedAccessConditions: &lease.ModifiedAccessConditions{IfMatch: props.ETag},
		})
		switch {
		case bloberror.HasCode(err, bloberror.ConditionNotMet, bloberror.BlobNotFound, bloberror.ContainerNotFound):
			continue // changed (or deleted) since the read
		case bloberror.HasCode(err, bloberror.LeaseAlreadyPresent, bloberror.LeaseIsBreakingAndCannotBeAcquired):
			return nil, &fence.HeldError{Key: req.Key} // taken since the read
		case err != nil:
			if !azkit.Refused(err) {
				// The request may have reached the service: let go of a
				// lease it may have granted.
				s.abandon(ctx, lc)
			}
			return nil, azkit.Err(op+": lease", err)
		}
		if testHookLeased != nil {
			testHookLeased(req.Key)
		}

		md, err := holderMetadata(req.Key, req.Owner, token, dur, req.Meta)
		if err != nil {
			s.abandon(ctx, lc)
			return nil, err
		}
		_, err = b.SetMetadata(ctx, md, &blob.SetMetadataOptions{AccessConditions: &blob.AccessConditions{
			ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: acq.ETag},
			LeaseAccessConditions:    &blob.LeaseAccessConditions{LeaseID: &id},
		}})
		if err != nil && azkit.Status(err) == http.StatusPreconditionFailed && s.written(ctx, b, id, req.Owner, token) {
			err = nil // the SDK retried a write that had landed
		}
		if err != nil {
			s.abandon(ctx, lc)
			if lostLease(err) {
				continue // broken (or expired) and taken since: read again
			}
			return nil, azkit.Err(op+": write token", err)
		}
		return &claim{key: req.Key, lc: lc, token: token, dur: dur}, nil
	}
	// Every read was overtaken by another acquisition: the key is busy.
	return nil, &fence.HeldError{Key: req.Key}
}

// lostLease reports whether a write under a lease failed because the lease
// is no longer this one.
func lostLease(err error) bool {
	return bloberror.HasCode(err, bloberror.LeaseIDMismatchWithBlobOperation,
		bloberror.LeaseNotPresentWithBlobOperation, bloberror.LeaseLost, bloberror.ConditionNotMet)
}

// written reports whether the blob's metadata holds token and owner under
// the lease id: whether a token write the SDK retried had in fact landed
// the first time.
func (s *Store) written(ctx context.Context, b *blob.Client, id, owner string, token int64) bool {
	props, err := b.GetProperties(ctx, &blob.GetPropertiesOptions{AccessConditions: &blob.AccessConditions{
		LeaseAccessConditions: &blob.LeaseAccessConditions{LeaseID: &id},
	}})
	if err != nil {
		return false
	}
	n, _ := counter(props.Metadata)
	h := holderFrom("", props.Metadata, props.LeaseState)
	return n == token && h.Owner == owner
}

// abandon releases a lease this attempt may hold and cannot grant, even if
// ctx is done (a cancelled wait must leave nothing behind). If that fails
// too, the lease expires on its own.
func (s *Store) abandon(ctx context.Context, lc *lease.BlobClient) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abandonTimeout)
	defer cancel()
	_, _ = lc.ReleaseLease(ctx, nil)
}

// create makes key's blob, with the key as its content, only if it does
// not exist yet: an existing blob holds a counter that must not be reset.
// It creates the container if that is missing.
func (s *Store) create(ctx context.Context, key, name string) error {
	bb := s.c.NewBlockBlobClient(name)
	upload := func() error {
		_, err := bb.Upload(ctx, streaming.NopCloser(strings.NewReader(key)), &blockblob.UploadOptions{
			HTTPHeaders: &blob.HTTPHeaders{BlobContentType: new("text/plain; charset=utf-8")},
			AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{
				IfNoneMatch: new(azcore.ETagAny),
			}},
		})
		return err
	}
	err := upload()
	if bloberror.HasCode(err, bloberror.ContainerNotFound) {
		_, err = s.c.Create(ctx, nil)
		if err != nil && !bloberror.HasCode(err, bloberror.ContainerAlreadyExists) {
			return azkit.Err("fenceazblob: create container", err)
		}
		err = upload()
	}
	if err != nil && !bloberror.HasCode(err, bloberror.BlobAlreadyExists, bloberror.ConditionNotMet) {
		return azkit.Err("fenceazblob: acquire "+strconv.Quote(key)+": create blob", err)
	}
	return nil
}

// claim is one granted blob lease.
type claim struct {
	key   string
	lc    *lease.BlobClient
	token int64
	dur   int32 // seconds
}

func (c *claim) Token() int64 { return c.token }

// Extend renews the blob lease, for its duration from now. A lease's
// duration is fixed when it is acquired, so ttl must not need more.
func (c *claim) Extend(ctx context.Context, ttl time.Duration) error {
	op := "fenceazblob: renew " + strconv.Quote(c.key)
	if dur, err := leaseSeconds(ttl); err != nil || dur > c.dur {
		return fmt.Errorf("%s: %w: the lease lasts %ds, fixed when it was acquired; cannot extend it to %v",
			op, fence.ErrInvalidTTL, c.dur, ttl)
	}
	_, err := c.lc.RenewLease(ctx, nil)
	if err != nil {
		return notHeld(op, err)
	}
	return nil
}

// Release renews the blob lease, then releases it. Only the lease's own
// ID can release it, but the service lets it release a lease broken
// behind its back, which would hide the loss; a renewal is refused for a
// broken lease as for one taken since. Either refusal returns an error
// matching fence.ErrNotHeld.
func (c *claim) Release(ctx context.Context) error {
	op := "fenceazblob: release " + strconv.Quote(c.key)
	if _, err := c.lc.RenewLease(ctx, nil); err != nil {
		return notHeld(op, err)
	}
	if _, err := c.lc.ReleaseLease(ctx, nil); err != nil {
		return notHeld(op, err)
	}
	return nil
}

var _ fence.Breaker = (*Store)(nil)

// Break implements fence.Breaker: it breaks key's lease at once, behind
// its holder's back, as an operator would (az storage blob lease break
// --lease-break-period 0), only if the blob's token (its metadata) is
// token (any, for 0). The break is conditioned on the ETag of the read
// that showed the token (If-Match): a new holder writes its token into
// the metadata, which changes the ETag, so a break never reaches it, and
// Break looks again. The key is free for other contenders at once, the
// holder's next renewal is refused and its lease lost. The token counter
// is kept, so tokens go on growing. The conformance suite's forced loss
// uses it with token 0. Break returns an error matching fence.ErrNotHeld
// if the key is not held.
func (s *Store) Break(ctx context.Context, key string, token int64) (fence.Holder, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Holder{}, err
	}
	op := "fenceazblob: break " + strconv.Quote(key)
	b := s.c.NewBlobClient(BlobName(key))
	lc, err := lease.NewBlobClient(b, nil)
	if err != nil {
		return fence.Holder{}, fmt.Errorf("%s: %w", op, err)
	}
	for range maxRaces {
		props, err := b.GetProperties(ctx, nil)
		if bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
			return fence.Holder{}, fmt.Errorf("%s: %w", op, fence.ErrNotHeld)
		}
		if err != nil {
			return fence.Holder{}, azkit.Err(op+": read", err)
		}
		// Breaking a broken or expired lease succeeds: look first.
		if !held(props.LeaseState) {
			return fence.Holder{}, fmt.Errorf("%s: %w", op, fence.ErrNotHeld)
		}
		h := holderFrom(key, props.Metadata, props.LeaseState)
		if token != 0 && h.Token != token {
			return fence.Holder{}, &fence.HeldError{Key: key, Holder: &h}
		}
		_, err = lc.BreakLease(ctx, &lease.BlobBreakOptions{BreakPeriod: new(int32(0)),
			ModifiedAccessConditions: &lease.ModifiedAccessConditions{IfMatch: props.ETag}})
		switch {
		case err == nil:
			return h, nil
		case bloberror.HasCode(err, bloberror.ConditionNotMet):
			continue // changed since the read: look again
		}
		return fence.Holder{}, notHeld(op, err)
	}
	return fence.Holder{}, fmt.Errorf("%s: the blob keeps changing under the break", op)
}

// serverTime is the store's clock as a response tells it: its Date header,
// or the blob's last modification where a response has no date.
func serverTime(date, lastModified *time.Time) *time.Time {
	if date != nil {
		return date
	}
	return lastModified
}
