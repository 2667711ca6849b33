package fencedynamo

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// createPoll is how often CreateTable asks whether the table is active.
const createPoll = 200 * time.Millisecond

// CreateTable creates the store's table if it does not exist: a partition
// key "k" of type string, no sort key, billed on demand
// (PAY_PER_REQUEST). It waits until the table is active, or ctx is done.
// A table that exists already is left as it is (its key schema is not
// checked here: the first read of an item with another schema fails).
func (s *Store) CreateTable(ctx context.Context) error {
	op := "fencedynamo: create table " + s.table
	_, err := s.db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName:            &s.table,
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(attrName), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(attrName), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return storageErr(op, s.table, err)
	}
	for {
		out, err := s.db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: &s.table})
		switch {
		case err != nil && !missingTable(err):
			return storageErr(op, s.table, err)
		case err == nil && out.Table != nil && out.Table.TableStatus == types.TableStatusActive:
			return nil
		case err == nil && out.Table != nil && out.Table.TableStatus == types.TableStatusDeleting:
			return fmt.Errorf("%s: the table is being deleted", op)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: waiting for the table to be active: %w", op, ctx.Err())
		case <-time.After(createPoll):
		}
	}
}

// Retryer returns a retryer suited to leases, for aws.Config.Retryer or
// dynamodb.Options.Retryer: the SDK's standard retries of throttling,
// 5xx answers and network errors, at most 3 attempts, backing off at most
// a second (the Client retries renewals itself, within the lease's
// validity), and without the SDK's client-side retry quota, which after a
// burst of network errors refuses retries (QuotaExceededError) just when
// a renewal needs them.
func Retryer() aws.Retryer {
	return retry.NewStandard(func(o *retry.StandardOptions) {
		o.MaxAttempts = 3
		o.MaxBackoff = time.Second
		o.RateLimiter = ratelimit.None
	})
}
