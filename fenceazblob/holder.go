package fenceazblob

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/azkit"
)

// The blob's metadata holds the token counter and the current (or last)
// holder. Azure treats metadata names without regard to case, and the SDK
// returns them in HTTP header case ("Fencetoken") from some calls and as
// stored from others, so they are looked up ignoring case.
const (
	mdToken    = "fencetoken"    // the last token issued for the key, decimal
	mdOwner    = "fenceowner"    // the holder's owner id, query-escaped
	mdDuration = "fenceduration" // the holder's lease duration, in seconds
	mdMeta     = "fencemeta"     // the holder's metadata: JSON, query-escaped

	maxMetadata = 8 << 10 // Azure's limit on a blob's metadata, names and values
)

// holderMetadata returns the metadata an acquisition writes: the new token
// and the holder. It fails, before anything is sent, if the holder's
// metadata does not fit Azure's limit.
func holderMetadata(key, owner string, token int64, dur int32, meta map[string]string) (map[string]*string, error) {
	md := map[string]*string{
		mdToken:    new(strconv.FormatInt(token, 10)),
		mdOwner:    new(url.QueryEscape(owner)),
		mdDuration: new(strconv.Itoa(int(dur))),
	}
	if len(meta) > 0 {
		js, err := json.Marshal(meta)
		if err != nil {
			return nil, fmt.Errorf("fenceazblob: acquire %q: holder metadata: %w", key, err)
		}
		md[mdMeta] = new(url.QueryEscape(string(js)))
	}
	size := 0
	for k, v := range md {
		size += len(k) + len(*v)
	}
	if size > maxMetadata {
		return nil, fmt.Errorf("fenceazblob: acquire %q: %w: the holder's metadata takes %d bytes of blob metadata; Azure allows %d",
			key, fence.ErrInvalidOption, size, maxMetadata)
	}
	return md, nil
}

// metaValue returns the metadata value of name, ignoring case.
func metaValue(md map[string]*string, name string) (string, bool) {
	for k, v := range md {
		if v != nil && strings.EqualFold(k, name) {
			return *v, true
		}
	}
	return "", false
}

// counter returns the token counter kept in md; false if there is none
// (a new blob, or metadata someone else overwrote).
func counter(md map[string]*string) (int64, bool) {
	v, ok := metaValue(md, mdToken)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}

// nextToken returns the token the next acquisition of a blob issues: one
// more than its counter, and at least the store's clock in microseconds
// (at the second's resolution Azure's timestamps have). The counter grows
// by one per acquisition, far slower than the clock's million a second, so
// the clock seed keeps tokens increasing even when the counter goes back or
// is lost: a blob deleted and recreated, its metadata overwritten, an older
// copy restored, an emulator or a geo-failover that lost the last writes.
// The one assumption: the store's clock does not go back, and a counter
// that goes back loses no more than what was issued before the current
// second.
func nextToken(md map[string]*string, now *time.Time) (int64, error) {
	var seed int64 = 1
	if now != nil {
		seed = max(seed, now.Unix()*1e6)
	}
	n, ok := counter(md)
	if !ok {
		return seed, nil
	}
	if n == 1<<63-1 {
		return 0, fmt.Errorf("token counter exhausted")
	}
	return max(n+1, seed), nil
}

// held reports whether a lease state keeps the key from other acquirers.
func held(state *lease.StateType) bool {
	return state != nil && (*state == lease.StateTypeLeased || *state == lease.StateTypeBreaking)
}

// holderFrom describes the holder of a held blob from its metadata. The
// service tells a lease's state, not its remaining time, so ExpiresIn is
// the lease's duration: the most the store keeps the key after the
// holder's last renewal. A breaking lease reports 0: its holder can no
// longer renew, and the service does not tell when the break ends.
//
// For the one round trip between an acquisition's lease and its metadata
// write, the metadata still describes the previous holder.
func holderFrom(key string, md map[string]*string, state *lease.StateType) fence.Holder {
	h := fence.Holder{Key: key}
	if v, ok := metaValue(md, mdOwner); ok {
		h.Owner, _ = url.QueryUnescape(v)
	}
	h.Token, _ = counter(md)
	if v, ok := metaValue(md, mdDuration); ok && state != nil && *state == lease.StateTypeLeased {
		if s, err := strconv.Atoi(v); err == nil && s > 0 {
			h.ExpiresIn = time.Duration(s) * time.Second
		}
	}
	if v, ok := metaValue(md, mdMeta); ok {
		if js, err := url.QueryUnescape(v); err == nil {
			var m map[string]string
			if json.Unmarshal([]byte(js), &m) == nil {
				h.Meta = m
			}
		}
	}
	return h
}

// Inspect returns the holder of key, or an error matching fence.ErrNotHeld
// if its blob is not leased. It costs one request.
func (s *Store) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Holder{}, err
	}
	props, err := s.c.NewBlobClient(BlobName(key)).GetProperties(ctx, nil)
	switch {
	case bloberror.HasCode(err, bloberror.BlobNotFound, bloberror.ContainerNotFound):
		return fence.Holder{}, fmt.Errorf("fenceazblob: inspect %q: %w: no such blob", key, fence.ErrNotHeld)
	case err != nil:
		return fence.Holder{}, azkit.Err("fenceazblob: inspect "+strconv.Quote(key), err)
	case !held(props.LeaseState):
		return fence.Holder{}, fmt.Errorf("fenceazblob: inspect %q: %w", key, fence.ErrNotHeld)
	}
	return holderFrom(key, props.Metadata, props.LeaseState), nil
}

// List returns the holders of the leased keys that start with prefix,
// sorted by key. It lists the container's blobs by name prefix, with
// their metadata: one request per 5,000 blobs, plus one per leased key
// too long for an escaped blob name (its key is read from the blob).
func (s *Store) List(ctx context.Context, prefix string) ([]fence.Holder, error) {
	var hs []fence.Holder
	err := s.listBlobs(ctx, escapedPrefix+names.Encode(prefix), func(name string, item *container.BlobItem) error {
		if key, ok := keyFromName(name); ok && strings.HasPrefix(key, prefix) {
			hs = append(hs, holderFrom(key, item.Metadata, item.Properties.LeaseState))
		}
		return nil
	})
	if err == nil {
		err = s.listBlobs(ctx, hashedPrefix, func(name string, item *container.BlobItem) error {
			key, err := s.hashedKey(ctx, name)
			if err != nil || !strings.HasPrefix(key, prefix) || BlobName(key) != name {
				return err
			}
			hs = append(hs, holderFrom(key, item.Metadata, item.Properties.LeaseState))
			return nil
		})
	}
	if err != nil {
		return nil, err
	}
	slices.SortFunc(hs, func(a, b fence.Holder) int { return cmp.Compare(a.Key, b.Key) })
	return hs, nil
}

// listBlobs calls f for every leased blob whose name starts with prefix.
func (s *Store) listBlobs(ctx context.Context, prefix string, f func(string, *container.BlobItem) error) error {
	pager := s.c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{
		Prefix:  &prefix,
		Include: container.ListBlobsInclude{Metadata: true},
	})
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if bloberror.HasCode(err, bloberror.ContainerNotFound) {
			return nil
		}
		if err != nil {
			return azkit.Err("fenceazblob: list", err)
		}
		for _, item := range page.Segment.BlobItems {
			if item.Name == nil || item.Properties == nil || !held(item.Properties.LeaseState) {
				continue
			}
			if err := f(*item.Name, item); err != nil {
				return err
			}
		}
	}
	return nil
}

// hashedKey reads the key a hashed blob holds as its content.
func (s *Store) hashedKey(ctx context.Context, name string) (string, error) {
	resp, err := s.c.NewBlobClient(name).DownloadStream(ctx, nil)
	if err != nil {
		return "", azkit.Err("fenceazblob: list: read "+name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, fence.MaxKeyLen+1))
	if err != nil {
		return "", fmt.Errorf("fenceazblob: list: read %s: %w", name, err)
	}
	return string(b), nil
}
