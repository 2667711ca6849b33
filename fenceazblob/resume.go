package fenceazblob

import (
	"context"
	"fmt"
	"strconv"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/azkit"
	"github.com/fencing/fence/internal/kit/unavail"
)

var _ fence.Resumer = (*Store)(nil)

// Resume implements fence.Resumer: it renews key's blob lease with the
// lease ID of req.Owner (LeaseID), so the service itself refuses it for
// another owner, conditioned on the ETag of the read that showed tok in
// the blob's metadata (If-Match), so it is refused if anyone wrote a
// token since. A blob lease's duration is fixed when it is acquired: a
// req.TTL that needs more is refused with fence.ErrInvalidTTL. The
// holder's metadata stays as it was acquired. Its errors that say the
// service could not answer for now match fence.ErrUnavailable.
func (s *Store) Resume(ctx context.Context, req fence.Request, tok int64) (_ fence.Claim, err error) {
	defer func() { err = unavail.Mark(err, azkit.Unavailable) }()
	if req.Kind != fence.KindLock {
		return nil, fmt.Errorf("fenceazblob: resume %q: %w: %s", req.Key, fence.ErrUnsupported, req.Kind)
	}
	op := "fenceazblob: resume " + strconv.Quote(req.Key)
	want, err := leaseSeconds(req.TTL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	b := s.c.NewBlobClient(BlobName(req.Key))
	id := LeaseID(req.Owner)
	lc, err := lease.NewBlobClient(b, &lease.BlobClientOptions{LeaseID: &id})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	for range maxRaces {
		props, err := b.GetProperties(ctx, nil)
		if bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound) {
			return nil, fmt.Errorf("%s: %w", op, fence.ErrNotHeld)
		}
		if err != nil {
			return nil, azkit.Err(op+": read", err)
		}
		if !held(props.LeaseState) {
			return nil, fmt.Errorf("%s: %w", op, fence.ErrNotHeld)
		}
		h := holderFrom(req.Key, props.Metadata, props.LeaseState)
		if h.Owner != req.Owner || h.Token != tok {
			return nil, &fence.HeldError{Key: req.Key, Holder: &h}
		}
		dur := int32(h.ExpiresIn.Seconds())
		if dur < want {
			return nil, fmt.Errorf("%s: %w: the lease lasts %ds, fixed when it was acquired; cannot resume it for %v",
				op, fence.ErrInvalidTTL, dur, req.TTL)
		}
		_, err = lc.RenewLease(ctx, &lease.BlobRenewOptions{
			ModifiedAccessConditions: &lease.ModifiedAccessConditions{IfMatch: props.ETag}})
		switch {
		case err == nil:
			return &claim{key: req.Key, lc: lc, token: tok, dur: dur}, nil
		case bloberror.HasCode(err, bloberror.ConditionNotMet):
			continue // changed since the read: look again
		}
		return nil, notHeld(op, err)
	}
	return nil, fmt.Errorf("%s: the blob keeps changing under the resume", op)
}
