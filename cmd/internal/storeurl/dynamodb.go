package storeurl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencedynamo"
)

func init() {
	register("dynamodb", scheme{open: openDynamo, forms: []string{
		"dynamodb://TABLE?region=REGION (credentials from the AWS default chain)",
		"dynamodb://KEYID:SECRET@TABLE?region=REGION&endpoint=http://HOST:PORT&create=1 (DynamoDB Local, dynalite)",
	}})
}

// openDynamo opens a DynamoDB table (docs/dynamodb.md):
//
//	dynamodb://TABLE[?region=REGION][&endpoint=URL][&create=1]
//	dynamodb://KEYID:SECRET@TABLE?...
//
// The region is the first of ?region= and the AWS default chain's
// (AWS_REGION, ~/.aws/config); credentials are KEYID:SECRET in the URL
// (the secret percent-encoded), or else the default chain's (environment,
// shared files, SSO, the instance's or task's role). endpoint replaces
// the service's endpoint (DynamoDB Local, dynalite); create=1 creates the
// table when it is missing (fencedynamo.WithCreateTable).
func openDynamo(ctx context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
	table := u.Host
	if err := checkDynamoTable(table); err != nil {
		return nil, nil, badURL(u, "%v", err)
	}
	if u.Path != "" && u.Path != "/" {
		return nil, nil, badURL(u, "the table is the host part (dynamodb://TABLE), and the URL has no path, not %q", u.Path)
	}
	q := u.Query()
	for p, vs := range q {
		if p != "region" && p != "endpoint" && p != "create" {
			return nil, nil, badURL(u, "unknown parameter %q; a dynamodb URL takes region, endpoint and create", p)
		}
		if len(vs) != 1 {
			return nil, nil, badURL(u, "parameter %q given %d times", p, len(vs))
		}
	}
	var opts []fencedynamo.Option
	if v := q.Get("create"); v != "" {
		create, err := strconv.ParseBool(v)
		if err != nil {
			return nil, nil, badURL(u, "create=%q: want 1 or 0", v)
		}
		if create {
			opts = append(opts, fencedynamo.WithCreateTable())
		}
	}
	endpoint := q.Get("endpoint")
	if endpoint != "" {
		e, err := url.Parse(endpoint)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
			return nil, nil, badURL(u, "endpoint=%q: want an http:// or https:// URL", endpoint)
		}
	}
	load := []func(*config.LoadOptions) error{config.WithRetryer(fencedynamo.Retryer)}
	if r := q.Get("region"); r != "" {
		load = append(load, config.WithRegion(r))
	}
	if u.User != nil {
		secret, ok := u.User.Password()
		if u.User.Username() == "" || !ok || secret == "" {
			return nil, nil, badURL(u, "credentials in the URL are KEYID:SECRET@ (both, the secret percent-encoded)")
		}
		load = append(load, config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(u.User.Username(), secret, "")))
	}
	cfg, err := config.LoadDefaultConfig(ctx, load...)
	if err != nil {
		return nil, nil, fmt.Errorf("AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, nil, errors.New("no AWS region: give ?region= in the URL, or set AWS_REGION")
	}
	// The store's own connections, on the transport the configuration
	// built (with AWS_CA_BUNDLE's roots, if set), so that Close can close
	// them.
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = awshttp.NewBuildableClient()
	}
	bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient)
	if !ok {
		return nil, nil, fmt.Errorf("AWS configuration: unexpected HTTP client %T", cfg.HTTPClient)
	}
	tr := bc.GetTransport()
	cfg.HTTPClient = &http.Client{Transport: tr}
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
	})
	return fencedynamo.New(db, table, opts...), idleCloser{tr}, nil
}

// checkDynamoTable applies DynamoDB's rules for table names.
func checkDynamoTable(name string) error {
	bad := len(name) < 3 || len(name) > 255
	for _, c := range name {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-' || c == '.') {
			bad = true
		}
	}
	if bad {
		return fmt.Errorf("table name %q: want 3 to 255 letters, digits, '_', '-' and '.'", name)
	}
	return nil
}
