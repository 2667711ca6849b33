package fencedynamo_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencedynamo"
	"github.com/fencing/fence/internal/testkit/recordtest"
	"github.com/fencing/fence/internal/testkit/testserver"
)

const ttl = 2 * time.Second

// harness describes fencedynamo to recordtest, the suite it shares with
// the other record-version stores.
func harness() recordtest.Harness[*fencedynamo.Store] {
	return recordtest.Harness[*fencedynamo.Store]{
		TTL:    ttl,
		Record: "item", Version: "record version",
		Server: func(t *testing.T) (string, recordtest.Process) {
			d := testserver.Dynalite(t)
			return testserver.Name("fence-") + "|" + d.Endpoint(), d
		},
		Open: func(connect string) (*fencedynamo.Store, func() error, error) {
			return open(connect)
		},
		Delete: deleteItem,
		Strip: func(ctx context.Context, s *fencedynamo.Store, key string) error {
			stripped := map[string]types.AttributeValue{
				"k":     &types.AttributeValueMemberS{Value: fencedynamo.PartitionKey(key)},
				"key":   &types.AttributeValueMemberS{Value: key},
				"other": &types.AttributeValueMemberS{Value: "x"},
			}
			_, err := s.Client().PutItem(ctx, &dynamodb.PutItemInput{TableName: ptr(s.Table()), Item: stripped})
			return err
		},
		SetTestHook:      fencedynamo.SetTestHook,
		SetSettleTimeout: fencedynamo.SetSettleTimeout,
		SetDelayMutant:   fencedynamo.SetDelayMutant,
		MetadataTooLarge: 400000,
		NoTable: func(ctx context.Context, s *fencedynamo.Store) error {
			_, err := s.Client().DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: ptr(s.Table())})
			if nf := (*types.ResourceNotFoundException)(nil); !errors.As(err, &nf) {
				return fmt.Errorf("describing the table: %v; want ResourceNotFoundException", err)
			}
			return nil
		},
		// dynalite keeps its tables in LevelDB, written as it goes.
		Persisted: 0,
		// The expiry checks can fail: each mutant judges expiry the
		// broken way SetWatchMutant describes.
		Mutants: map[string]recordtest.Mutant[*fencedynamo.Store]{
			"expired-at-first-look": {
				Set: func(*recordtest.Harness[*fencedynamo.Store]) func() {
					return fencedynamo.SetWatchMutant("expired-at-first-look")
				},
				Catch: []string{"ExpiryOnOwnClock"},
				Why:   "first look at a dead holder's key",
			},
			"version-blind": {
				Set: func(*recordtest.Harness[*fencedynamo.Store]) func() {
					return fencedynamo.SetWatchMutant("version-blind")
				},
				Catch: []string{"RenewalRestartsWatch"},
				Why:   "key taken though its holder renewed within the contender's watch",
			},
		},
	}
}

// TestRecord runs the record-version stores' shared tests against
// dynalite.
func TestRecord(t *testing.T) { recordtest.Run(t, harness()) }

// TestConformance runs fence's conformance suite against dynalite.
func TestConformance(t *testing.T) { recordtest.Conformance(t, harness()) }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func req(key, owner string) fence.Request { return fence.Request{Key: key, Owner: owner, TTL: ttl} }

// deleteItem deletes key's item behind fence's back.
func deleteItem(ctx context.Context, s *fencedynamo.Store, key string) error {
	_, err := s.Client().DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: ptr(s.Table()),
		Key:       map[string]types.AttributeValue{"k": &types.AttributeValueMemberS{Value: fencedynamo.PartitionKey(key)}},
	})
	return err
}

func ptr(s string) *string { return &s }
