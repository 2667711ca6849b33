package fenceaztable

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/azkit"
)

// Inspect returns the holder of key, or an error matching fence.ErrNotHeld
// if its entity names none, or names one this Store has seen write
// nothing for its full TTL and lock-delay. It costs one request.
// ExpiresIn is what is left, as this Store watched it, until the key is
// free: the holder's TTL (and lock-delay) on the first look at a write,
// less after; during a lock-delay the lost holder is still shown.
func (s *Store) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Holder{}, err
	}
	op := "fenceaztable: inspect " + strconv.Quote(key)
	cur, etag, _, found, err := s.read(ctx, key)
	switch {
	case err != nil:
		return fence.Holder{}, azkit.Err(op, err)
	case !found:
		return fence.Holder{}, fmt.Errorf("%s: %w: no such entity", op, fence.ErrNotHeld)
	case !cur.held():
		return fence.Holder{}, fmt.Errorf("%s: %w", op, fence.ErrNotHeld)
	}
	left, _ := s.watchHeld(PartitionKey(key), &cur, etag, fence.DefaultTTL)
	if left <= 0 {
		return fence.Holder{}, fmt.Errorf("%s: %w: its holder has not renewed for its TTL (%v)", op, fence.ErrNotHeld, cur.ttl)
	}
	return cur.holder(key, left), nil
}

// List returns the holders of the held keys that start with prefix,
// sorted by key. It queries the table for the entities that name a
// holder: one request per 1,000 of them. Like Inspect, it leaves out the
// holders this Store has seen write nothing for their full TTL and
// lock-delay.
func (s *Store) List(ctx context.Context, prefix string) ([]fence.Holder, error) {
	filter := "Owner ne ''"
	pager := s.t.NewListEntitiesPager(&aztables.ListEntitiesOptions{Filter: &filter})
	var hs []fence.Holder
	now := time.Now()
	for pager.More() {
		page, err := pager.NextPage(ctx)
		if azkit.Code(err) == string(aztables.TableNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, azkit.Err("fenceaztable: list", err)
		}
		for _, raw := range page.Entities {
			e, err := parseEntity(raw)
			if err != nil || !e.held() || !strings.HasPrefix(e.key, prefix) || fence.ValidateKey(e.key) != nil {
				continue
			}
			etag, _ := odataETag(raw)
			left := e.blockFor(fence.DefaultTTL)
			if etag != "" {
				left = s.watch(PartitionKey(e.key), etag, left, now)
			}
			if left > 0 {
				hs = append(hs, e.holder(e.key, left))
			}
		}
	}
	slices.SortFunc(hs, func(a, b fence.Holder) int { return cmp.Compare(a.Key, b.Key) })
	return hs, nil
}
