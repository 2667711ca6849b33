package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/to"
	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/go-zookeeper/zk"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/fencing/fence/internal/testkit/testserver"
)

// wipeZK deletes the root znode and everything under it: the keys'
// queues, their holders' znodes and the token epoch. Other sessions'
// ephemeral znodes can be deleted by anyone.
//
// A znode goes with its children in one multi, so that a contender that
// queues meanwhile fails the whole multi, which is then tried again: a
// busy queue (semaphores and reader-writer locks queue busily, and their
// waiters queue again at once when their entry vanishes) emptied one
// child at a time could refill as fast as it emptied. A multi that fails
// for another reason (a child with children of its own) takes the
// children one by one, the same way, before the next try.
func wipeZK(addrs []string, root string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		conn, _, err := zk.Connect(addrs, 10*time.Second, zk.WithLogger(zkQuiet{}))
		if err != nil {
			return "", err
		}
		defer conn.Close()
		n := 0
		deadline := time.Now().Add(10 * time.Second)
		var del func(path string) error
		del = func(path string) error {
			for {
				kids, _, err := conn.Children(path)
				if errors.Is(err, zk.ErrNoNode) {
					return nil
				}
				if err != nil {
					return err
				}
				ops := make([]any, 0, len(kids)+1)
				for _, k := range kids {
					ops = append(ops, &zk.DeleteRequest{Path: path + "/" + k, Version: -1})
				}
				ops = append(ops, &zk.DeleteRequest{Path: path, Version: -1})
				err = multiErr(conn.Multi(ops...))
				switch {
				case err == nil:
					n += len(ops)
					return nil
				case !errors.Is(err, zk.ErrNotEmpty) && !errors.Is(err, zk.ErrNoNode):
					return fmt.Errorf("delete %s: %w", path, err)
				case time.Now().After(deadline) || ctx.Err() != nil:
					return fmt.Errorf("delete %s: still not empty after 10s: %w", path, err)
				}
				for _, k := range kids {
					if err := del(path + "/" + k); err != nil {
						return err
					}
				}
			}
		}
		if err := del(root); err != nil {
			return "", err
		}
		if n == 0 {
			return "", fmt.Errorf("nothing under %s to delete while a worker held a lease", root)
		}
		return fmt.Sprintf("deleted %s and the %d znodes under it", root, n-1), nil
	}
}

// multiErr is the error of a multi: the call's, or its first failed
// operation's.
func multiErr(res []zk.MultiResponse, err error) error {
	if err != nil {
		return err
	}
	for _, r := range res {
		if r.Error != nil {
			return r.Error
		}
	}
	return nil
}

// zkQuiet drops go-zookeeper's connection log.
type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// wipeK8s deletes every Lease of the namespace.
func wipeK8s(kubeconfig, namespace string) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return "", err
		}
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return "", err
		}
		leases := cs.CoordinationV1().Leases(namespace)
		l, err := leases.List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		if len(l.Items) == 0 {
			return "", fmt.Errorf("no Lease in namespace %s to delete while a worker held a lease", namespace)
		}
		if err := leases.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
			return "", err
		}
		return fmt.Sprintf("deleted the %d Leases of namespace %s", len(l.Items), namespace), nil
	}
}

// The stores that seed tokens from the service's clock at a second's
// resolution (Azure Blob and Table, DynamoDB) promise increasing tokens
// after their state is lost only if whatever is lost was issued before
// the current second of the service's clock (docs/azblob.md, aztable.md,
// dynamodb.md). A wipe that a grant could follow within the second of a
// token it removed would test a promise the stores do not make, so their
// wipe removes a record only if its token was issued in an earlier
// second. A token of these stores tells: it is the service's second that
// issued it, in microseconds, or the key's previous token plus one,
// whichever is larger, and grants are far fewer than a million a second,
// so a token below the current second's first microsecond was issued
// before it. The servers run on this machine, so its clock is theirs.

// agedRecord is one key's record in such a store: its token (0 when it
// has none) and what a conditional delete names (an ETag).
type agedRecord struct {
	id      string
	token   int64
	version string
}

// agedStore lists a store's records and deletes one if it is unchanged
// since it was listed (false, nil: it was not).
type agedStore struct {
	what   string
	list   func(context.Context) ([]agedRecord, error)
	remove func(context.Context, agedRecord) (bool, error)
}

// wipeAged deletes, once each, the records of st that its first listing
// found, each when it holds a token issued before the current second: a
// record granted within the current second waits for the next one, and
// for a listing then. A key granted again after its record was deleted
// has new state, which stays.
func wipeAged(st agedStore) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		var want map[string]bool // listed first, not deleted yet
		deleted, changed, waited := 0, 0, 0
		start := time.Now()
		for {
			recs, err := st.list(ctx)
			if err != nil {
				return "", err
			}
			if want == nil {
				want = map[string]bool{}
				for _, r := range recs {
					want[r.id] = true
				}
				if len(want) == 0 {
					return "", fmt.Errorf("no %s to delete while a worker held a lease", st.what)
				}
			}
			listed := map[string]bool{}
			for _, r := range recs {
				listed[r.id] = true
				if !want[r.id] {
					continue
				}
				if r.token >= time.Now().Unix()*1_000_000 {
					waited++ // issued within this second
					continue
				}
				ok, err := st.remove(ctx, r)
				switch {
				case err != nil:
					return "", fmt.Errorf("delete %s: %w", r.id, err)
				case ok:
					deleted++
					delete(want, r.id)
				default:
					changed++ // granted again since the listing
				}
			}
			for id := range want {
				if !listed[id] {
					delete(want, id) // deleted by someone else
				}
			}
			switch {
			case len(want) == 0:
				return fmt.Sprintf("deleted %d %s, each holding a token issued before the current second (%d waited for the next second, %d changed before their delete)", deleted, st.what, waited, changed), nil
			case time.Since(start) >= agedWipeFor:
				return "", fmt.Errorf("deleted %d %s in %v; %d were granted again within every second", deleted, st.what, agedWipeFor, len(want))
			}
			next := time.Unix(time.Now().Unix()+1, 0).Add(20 * time.Millisecond)
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(time.Until(next)):
			}
		}
	}
}

// agedWipeFor bounds a wipe of the stores that wait a second for it.
const agedWipeFor = 10 * time.Second

// wipeDynamo deletes the items of a DynamoDB table (dynalite at
// endpoint).
func wipeDynamo(endpoint, table string) func(context.Context) (string, error) {
	db := dynamodb.New(dynamodb.Options{
		BaseEndpoint: aws.String(endpoint),
		Region:       testserver.DynaliteRegion,
		Credentials:  credentials.NewStaticCredentialsProvider(testserver.DynaliteAccessKey, testserver.DynaliteSecretKey, ""),
	})
	return wipeAged(agedStore{
		what: "items of table " + table,
		list: func(ctx context.Context) ([]agedRecord, error) {
			var recs []agedRecord
			p := dynamodb.NewScanPaginator(db, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true)})
			for p.HasMorePages() {
				page, err := p.NextPage(ctx)
				if err != nil {
					return nil, err
				}
				for _, it := range page.Items {
					name, ok := it["k"].(*types.AttributeValueMemberS)
					if !ok {
						return nil, fmt.Errorf("an item of %s without its name attribute k: %v", table, it)
					}
					var tok int64
					if t, ok := it["token"].(*types.AttributeValueMemberN); ok {
						if tok, err = strconv.ParseInt(t.Value, 10, 64); err != nil {
							return nil, fmt.Errorf("item %s: token %q: %w", name.Value, t.Value, err)
						}
					}
					recs = append(recs, agedRecord{id: name.Value, token: tok})
				}
			}
			return recs, nil
		},
		remove: func(ctx context.Context, r agedRecord) (bool, error) {
			in := &dynamodb.DeleteItemInput{
				TableName: aws.String(table),
				Key:       map[string]types.AttributeValue{"k": &types.AttributeValueMemberS{Value: r.id}},
			}
			if r.token == 0 {
				in.ConditionExpression = aws.String("attribute_exists(k) AND attribute_not_exists(#t)")
			} else {
				in.ConditionExpression = aws.String("#t = :t")
				in.ExpressionAttributeValues = map[string]types.AttributeValue{":t": &types.AttributeValueMemberN{Value: strconv.FormatInt(r.token, 10)}}
			}
			in.ExpressionAttributeNames = map[string]string{"#t": "token"}
			_, err := db.DeleteItem(ctx, in)
			var cond *types.ConditionalCheckFailedException
			if errors.As(err, &cond) {
				return false, nil
			}
			return err == nil, err
		},
	})
}

// wipeAztable deletes the entities of an Azure table (Azurite's, at
// tableURL).
func wipeAztable(tableURL, table string) func(context.Context) (string, error) {
	cred, err := aztables.NewSharedKeyCredential(testserver.AzuriteAccount, testserver.AzuriteKey)
	if err != nil {
		panic(err) // the emulator's published key
	}
	c, err := aztables.NewClientWithSharedKey(tableURL+"/"+table, cred, nil)
	if err != nil {
		panic(err) // a URL the tool made
	}
	return wipeAged(agedStore{
		what: "entities of table " + table,
		list: func(ctx context.Context) ([]agedRecord, error) {
			var recs []agedRecord
			p := c.NewListEntitiesPager(nil)
			for p.More() {
				page, err := p.NextPage(ctx)
				if err != nil {
					return nil, err
				}
				for _, raw := range page.Entities {
					var e struct {
						PartitionKey, RowKey string
						Token                json.RawMessage
						ETag                 string `json:"odata.etag"`
					}
					if err := json.Unmarshal(raw, &e); err != nil {
						return nil, err
					}
					tok, err := strconv.ParseInt(string(trimQuotes(e.Token)), 10, 64)
					if err != nil && len(e.Token) > 0 {
						return nil, fmt.Errorf("entity %s: Token %s: %w", e.PartitionKey, e.Token, err)
					}
					recs = append(recs, agedRecord{id: e.PartitionKey + "\x00" + e.RowKey, token: tok, version: e.ETag})
				}
			}
			return recs, nil
		},
		remove: func(ctx context.Context, r agedRecord) (bool, error) {
			pk, rk, _ := strings.Cut(r.id, "\x00")
			etag := azcore.ETag(r.version)
			_, err := c.DeleteEntity(ctx, pk, rk, &aztables.DeleteEntityOptions{IfMatch: &etag})
			return azureChanged(err)
		},
	})
}

// wipeAzblob deletes the blobs of an Azure container (Azurite's, whose
// connection string is conn), breaking each one's lease first.
func wipeAzblob(conn, name string) func(context.Context) (string, error) {
	c, err := container.NewClientFromConnectionString(conn, name, nil)
	if err != nil {
		panic(err) // the emulator's published key
	}
	return wipeAged(agedStore{
		what: "blobs of container " + name,
		list: func(ctx context.Context) ([]agedRecord, error) {
			var recs []agedRecord
			p := c.NewListBlobsFlatPager(&container.ListBlobsFlatOptions{Include: container.ListBlobsInclude{Metadata: true}})
			for p.More() {
				page, err := p.NextPage(ctx)
				if err != nil {
					return nil, err
				}
				for _, b := range page.Segment.BlobItems {
					var tok int64
					for k, v := range b.Metadata {
						if k == "fencetoken" && v != nil {
							if tok, err = strconv.ParseInt(*v, 10, 64); err != nil {
								return nil, fmt.Errorf("blob %s: fencetoken %q: %w", *b.Name, *v, err)
							}
						}
					}
					recs = append(recs, agedRecord{id: *b.Name, token: tok, version: string(*b.Properties.ETag)})
				}
			}
			return recs, nil
		},
		remove: func(ctx context.Context, r agedRecord) (bool, error) {
			b := c.NewBlobClient(r.id)
			lc, err := lease.NewBlobClient(b, nil)
			if err != nil {
				return false, err
			}
			etag := azcore.ETag(r.version)
			// A lease is broken at once (period 0); a blob without one
			// answers 409, which the delete then settles.
			_, err = lc.BreakLease(ctx, &lease.BlobBreakOptions{BreakPeriod: to.Ptr[int32](0)})
			if err != nil && !azureStatus(err, http.StatusConflict) {
				return false, err
			}
			_, err = b.Delete(ctx, &blob.DeleteOptions{AccessConditions: &blob.AccessConditions{ModifiedAccessConditions: &blob.ModifiedAccessConditions{IfMatch: &etag}}})
			return azureChanged(err)
		},
	})
}

// azureChanged reads a conditional delete's answer: deleted, or refused
// because the record changed or went since it was listed.
func azureChanged(err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case azureStatus(err, http.StatusPreconditionFailed, http.StatusNotFound, http.StatusConflict):
		return false, nil
	}
	return false, err
}

func azureStatus(err error, codes ...int) bool {
	var re *azcore.ResponseError
	return errors.As(err, &re) && slices.Contains(codes, re.StatusCode)
}

func trimQuotes(b []byte) []byte {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		return b[1 : len(b)-1]
	}
	return b
}
