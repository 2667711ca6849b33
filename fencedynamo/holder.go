package fencedynamo

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencing/fence"
)

// Inspect returns the holder of key, or an error matching fence.ErrNotHeld
// if its item names none, or names one this Store has seen write nothing
// for its full TTL and lock-delay. It costs one strongly consistent read.
// ExpiresIn is what is left, as this Store watched it, until the key is
// free: the holder's TTL (and lock-delay) on the first look at a write,
// less after; during a lock-delay the lost holder is still shown.
func (s *Store) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	if err := fence.ValidateKey(key); err != nil {
		return fence.Holder{}, err
	}
	op := "fencedynamo: inspect " + strconv.Quote(key)
	cur, _, found, err := s.read(ctx, key)
	switch {
	case err != nil:
		return fence.Holder{}, storageErr(op, s.table, err)
	case !found:
		return fence.Holder{}, fmt.Errorf("%s: %w: no such item", op, fence.ErrNotHeld)
	case !cur.held():
		return fence.Holder{}, fmt.Errorf("%s: %w", op, fence.ErrNotHeld)
	}
	left, _ := s.watchHeld(PartitionKey(key), &cur, fence.DefaultTTL)
	if left <= 0 {
		return fence.Holder{}, fmt.Errorf("%s: %w: its holder has not renewed for its TTL (%v)", op, fence.ErrNotHeld, cur.ttl)
	}
	return cur.holder(key, left), nil
}

// List returns the holders of the held keys that start with prefix,
// sorted by key. It scans the whole table (strongly consistent, filtered
// on the service to the items that name a holder): one request per 1 MB
// of items read, every item's size counted against the table's read
// throughput. Like Inspect, it leaves out the holders this Store has seen
// write nothing for their full TTL and lock-delay.
func (s *Store) List(ctx context.Context, prefix string) ([]fence.Holder, error) {
	in := &dynamodb.ScanInput{
		TableName:                &s.table,
		ConsistentRead:           aws.Bool(true),
		FilterExpression:         aws.String("attribute_exists(#o)"),
		ExpressionAttributeNames: map[string]string{"#o": attrOwner},
	}
	if prefix != "" {
		in.FilterExpression = aws.String("attribute_exists(#o) AND begins_with(#key, :p)")
		in.ExpressionAttributeNames["#key"] = attrKey
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":p": &types.AttributeValueMemberS{Value: prefix}}
	}
	var hs []fence.Holder
	now := time.Now()
	for {
		page, err := s.db.Scan(ctx, in)
		if err != nil {
			return nil, storageErr("fencedynamo: list", s.table, err)
		}
		for _, raw := range page.Items {
			it := parseItem(raw)
			if !it.held() || !strings.HasPrefix(it.key, prefix) || fence.ValidateKey(it.key) != nil {
				continue
			}
			left := it.blockFor(fence.DefaultTTL)
			if it.rv != "" {
				left = s.watch(PartitionKey(it.key), &it, left, now)
			}
			if left > 0 {
				hs = append(hs, it.holder(it.key, left))
			}
		}
		if len(page.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = page.LastEvaluatedKey
	}
	slices.SortFunc(hs, func(a, b fence.Holder) int { return cmp.Compare(a.Key, b.Key) })
	return hs, nil
}
