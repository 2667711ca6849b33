package fencedynamo_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/fencing/fence/fencedynamo"
	"github.com/fencing/fence/internal/testkit/leakcheck"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m, testserver.IgnoreLeaks())
}

// server starts a private dynalite and returns the connect string of a
// new table on it (not created yet: stores from open create it).
func server(t *testing.T) string {
	t.Helper()
	connect, _ := harness().Server(t)
	return connect
}

// dynamoClient returns a DynamoDB client for endpoint with the static
// credentials dynalite accepts, on its own connections, which close
// closes.
func dynamoClient(endpoint string) (*dynamodb.Client, func() error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	db := dynamodb.New(dynamodb.Options{
		Region: testserver.DynaliteRegion,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: testserver.DynaliteAccessKey, SecretAccessKey: testserver.DynaliteSecretKey}, nil
		}),
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   &http.Client{Transport: tr},
		Retryer:      fencedynamo.Retryer(),
	})
	return db, func() error { tr.CloseIdleConnections(); return nil }
}

// open opens a store from a connect string made by server, with
// WithCreateTable: its own client with its own connections, which close
// closes.
func open(connect string, opts ...fencedynamo.Option) (*fencedynamo.Store, func() error, error) {
	table, endpoint, ok := strings.Cut(connect, "|")
	if !ok {
		return nil, nil, fmt.Errorf("bad connect string %q", connect)
	}
	db, closeFn := dynamoClient(endpoint)
	if opts == nil {
		opts = []fencedynamo.Option{fencedynamo.WithCreateTable()}
	}
	return fencedynamo.New(db, table, opts...), closeFn, nil
}

func mustOpen(t *testing.T, connect string, opts ...fencedynamo.Option) *fencedynamo.Store {
	t.Helper()
	s, closeFn, err := open(connect, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closeFn() })
	return s
}
