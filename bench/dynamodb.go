package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencedynamo"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// dynamoTable is the benchmark's table; the raw contender keeps its items
// beside fence's, under another partition key prefix.
const dynamoTable = "bench"

func dynamoContenders(endpoint string) []Contender {
	return []Contender{
		{Store: "dynamodb", Name: "fence", Role: RoleFence,
			Desc: "fencedynamo: one consistent GetItem + one PutItem conditional on the record version (token = counter + 1), release one conditional PutItem; waiters poll with the Client's backoff",
			Open: func(ctx context.Context, rt *atomic.Int64) (Client, error) {
				db, closeFn := newDynamo(endpoint, rt)
				return &fenceClient{c: fence.New(fencedynamo.New(db, dynamoTable), fence.WithTTL(TTL)), close: closeFn}, nil
			}},
		{Store: "dynamodb", Name: "raw", Role: RoleRaw,
			Desc: "one consistent GetItem + one conditional PutItem (token = counter + 1), release one conditional PutItem; waiters poll every 5 to 50 ms",
			Open: func(ctx context.Context, rt *atomic.Int64) (Client, error) {
				db, closeFn := newDynamo(endpoint, rt)
				return &rawDynamoClient{db: db, close: closeFn}, nil
			}},
	}
}

// newDynamo returns a DynamoDB client for dynalite at endpoint that
// counts its requests.
func newDynamo(endpoint string, rt *atomic.Int64) (*dynamodb.Client, func() error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	db := dynamodb.New(dynamodb.Options{
		Region: testserver.DynaliteRegion,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: testserver.DynaliteAccessKey, SecretAccessKey: testserver.DynaliteSecretKey}, nil
		}),
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   countingDoer{c: &http.Client{Transport: tr}, rt: rt},
		Retryer:      fencedynamo.Retryer(),
	})
	return db, func() error { tr.CloseIdleConnections(); return nil }
}

// setupDynamo creates the benchmark's table.
func setupDynamo(ctx context.Context, endpoint string) error {
	var rt atomic.Int64
	db, closeFn := newDynamo(endpoint, &rt)
	defer closeFn()
	return fencedynamo.New(db, dynamoTable).CreateTable(ctx)
}

// raw: the item of a key, read consistently, then put conditional on its
// version (or on its absence) with the counter bumped and an owner;
// released by a conditional put that clears the owner. No expiry: the
// benchmark's holders always release.

type rawDynamoClient struct {
	db    *dynamodb.Client
	close func() error
}

func (r *rawDynamoClient) Locker() Locker { return &rawDynamoLocker{db: r.db} }
func (r *rawDynamoClient) Close() error   { return r.close() }

type rawDynamoLocker struct {
	db    *dynamodb.Client
	pk    string
	token int64
	ver   string
}

func (r *rawDynamoLocker) Lock(ctx context.Context, key string) error {
	pk := "raw-" + key
	wait := 5 * time.Millisecond
	for {
		ok, err := r.try(ctx, pk)
		if err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait/2 + rand.N(wait/2)):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

func (r *rawDynamoLocker) try(ctx context.Context, pk string) (bool, error) {
	out, err := r.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(dynamoTable), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{"k": &types.AttributeValueMemberS{Value: pk}}})
	if err != nil {
		return false, err
	}
	var n int64
	var ver string
	if out.Item != nil {
		if _, held := out.Item["owner"]; held {
			return false, nil
		}
		if v, ok := out.Item["token"].(*types.AttributeValueMemberN); ok {
			n, _ = strconv.ParseInt(v.Value, 10, 64)
		}
		if v, ok := out.Item["rv"].(*types.AttributeValueMemberS); ok {
			ver = v.Value
		}
	}
	next := fmt.Sprintf("%x", rand.Uint64())
	in := r.put(pk, n+1, next, ver, out.Item != nil)
	in.Item["owner"] = &types.AttributeValueMemberS{Value: next}
	if _, err := r.db.PutItem(ctx, in); err != nil {
		var cf *types.ConditionalCheckFailedException
		if errors.As(err, &cf) {
			return false, nil
		}
		return false, err
	}
	r.pk, r.token, r.ver = pk, n+1, next
	return true, nil
}

// put is the conditional PutItem of pk's item with token and version
// ver, conditional on the version prev (or, if !found, on no item).
func (r *rawDynamoLocker) put(pk string, token int64, ver, prev string, found bool) *dynamodb.PutItemInput {
	in := &dynamodb.PutItemInput{TableName: aws.String(dynamoTable), Item: map[string]types.AttributeValue{
		"k":     &types.AttributeValueMemberS{Value: pk},
		"key":   &types.AttributeValueMemberS{Value: strings.TrimPrefix(pk, "raw-")},
		"token": &types.AttributeValueMemberN{Value: strconv.FormatInt(token, 10)},
		"rv":    &types.AttributeValueMemberS{Value: ver},
	}}
	if found {
		in.ConditionExpression = aws.String("rv = :rv")
		in.ExpressionAttributeValues = map[string]types.AttributeValue{":rv": &types.AttributeValueMemberS{Value: prev}}
	} else {
		in.ConditionExpression = aws.String("attribute_not_exists(k)")
	}
	return in
}

func (r *rawDynamoLocker) Unlock(ctx context.Context) error {
	_, err := r.db.PutItem(ctx, r.put(r.pk, r.token, fmt.Sprintf("%x", rand.Uint64()), r.ver, true))
	return err
}
