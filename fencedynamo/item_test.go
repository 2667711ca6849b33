package fencedynamo

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/unavail"
)

func TestItemRoundTrip(t *testing.T) {
	it := item{key: "jobs/nightly", token: 1<<62 + 7, owner: "o1", ttl: 2500 * time.Millisecond,
		meta: map[string]string{"host": "h", "pid": "7"}, released: "o0", rv: newRV()}
	m, err := it.marshal()
	if err != nil {
		t.Fatal(err)
	}
	if str(m[attrName]) != PartitionKey(it.key) {
		t.Errorf("partition key %q, want %q", str(m[attrName]), PartitionKey(it.key))
	}
	got := parseItem(m)
	if got.key != it.key || got.token != it.token || got.owner != it.owner || got.ttl != it.ttl ||
		got.meta["pid"] != "7" || got.released != it.released || got.rv != it.rv {
		t.Errorf("round trip: %+v, want %+v", got, it)
	}
	// A free item has no owner attribute (List filters on its presence).
	free := item{key: "k", token: 3, rv: newRV()}
	m, err = free.marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m[attrOwner]; ok {
		t.Errorf("a free item has an %q attribute", attrOwner)
	}
	// A lost or foreign counter reads as none; a held item without a TTL
	// is held for the fallback.
	got = parseItem(map[string]types.AttributeValue{
		attrKey:   &types.AttributeValueMemberS{Value: "k"},
		attrToken: &types.AttributeValueMemberS{Value: "nope"},
		attrOwner: &types.AttributeValueMemberS{Value: "x"},
	})
	if got.token != 0 || got.holdFor(time.Minute) != time.Minute || !got.held() || got.rv != "" {
		t.Errorf("foreign item: %+v", got)
	}
	big := item{key: "k", owner: "o", ttl: time.Second, meta: map[string]string{"x": strings.Repeat("y", maxMeta)}}
	if _, err := big.marshal(); !errors.Is(err, fence.ErrInvalidOption) {
		t.Errorf("oversized metadata: %v; want ErrInvalidOption", err)
	}
	if ttlMillis(1500*time.Microsecond) != 2*time.Millisecond {
		t.Errorf("ttlMillis rounds down")
	}
	if a, b := newRV(), newRV(); a == b || a == "" {
		t.Errorf("record versions %q and %q", a, b)
	}
}

func TestNextToken(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	for _, c := range []struct {
		counter int64
		now     time.Time
		want    int64
	}{
		{0, time.Unix(0, 0), 1},
		{5, time.Unix(0, 0), 6},
		{0, now, 1_800_000_000_000_000},
		{5, now, 1_800_000_000_000_000},
		{1_800_000_000_000_009, now, 1_800_000_000_000_010},
	} {
		if got, err := nextToken(c.counter, c.now); err != nil || got != c.want {
			t.Errorf("nextToken(%d, %v) = %d, %v; want %d", c.counter, c.now, got, err, c.want)
		}
	}
	if _, err := nextToken(1<<63-1, now); err == nil {
		t.Error("nextToken of an exhausted counter: no error")
	}
}

// TestServerDateRequired: without the store's clock the counter cannot
// be seeded; the read fails rather than seeding from nothing.
func TestServerDateRequired(t *testing.T) {
	h := map[string][]string{"Date": {"Fri, 04 Dec 2026 14:28:18 GMT"}}
	if d, err := serverDate(h); err != nil || d.Unix() != 1796394498 {
		t.Errorf("serverDate: %v, %v", d, err)
	}
	if _, err := serverDate(map[string][]string{}); err == nil {
		t.Error("serverDate without a Date header: no error")
	}
}

// TestStorageErrors: each kind of failure says what it means.
func TestStorageErrors(t *testing.T) {
	op := "fencedynamo: acquire \"k\""
	for _, c := range []struct {
		err  error
		want string
	}{
		{&types.ResourceNotFoundException{Message: ptr("Requested resource not found")}, `table "locks" does not exist`},
		{&types.ProvisionedThroughputExceededException{Message: ptr("slow down")}, "throttled by DynamoDB (ProvisionedThroughputExceededException)"},
		{&types.RequestLimitExceeded{Message: ptr("slow down")}, "throttled by DynamoDB (RequestLimitExceeded)"},
		{&types.ConditionalCheckFailedException{Message: ptr("The conditional request failed")}, "ConditionalCheckFailedException: The conditional request failed"},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), "DynamoDB unreachable or no answer: dial tcp"},
		{context.Canceled, op + ": context canceled"},
	} {
		err := storageErr(op, "locks", c.err)
		if !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), op+": ") || !errors.Is(err, c.err) {
			t.Errorf("storageErr(%T) = %q; want it to say %q, and to wrap the error", c.err, err, c.want)
		}
	}
	if !conflict(&types.ConditionalCheckFailedException{}) || conflict(&types.ResourceNotFoundException{}) {
		t.Error("conflict() mistakes the errors")
	}
	if !throttled(&types.ProvisionedThroughputExceededException{}) || throttled(&types.ConditionalCheckFailedException{}) {
		t.Error("throttled() mistakes the errors")
	}
}

func ptr(s string) *string { return &s }

// TestRetryer: at most 3 attempts, and no client-side retry quota (the
// SDK's default quota refuses retries after a burst of errors).
func TestRetryer(t *testing.T) {
	r := Retryer()
	if r.MaxAttempts() != 3 {
		t.Errorf("MaxAttempts() = %d, want 3", r.MaxAttempts())
	}
	if d := r.RetryDelay; d == nil {
		t.Fatal("no RetryDelay")
	}
	for i := range 1000 {
		if _, err := r.GetRetryToken(context.Background(), errors.New("connection reset")); err != nil {
			t.Fatalf("retry token %d refused: %v; want no retry quota", i, err)
		}
	}
	for attempt := 1; attempt < 10; attempt++ {
		if d, err := r.RetryDelay(attempt, errors.New("x")); err != nil || d > time.Second {
			t.Errorf("RetryDelay(%d) = %v, %v; want at most 1s", attempt, d, err)
		}
	}
}

// TestUnavailable: the answers that say the service could not serve the
// request for now, and the network's failures, mark an acquisition's
// error fence.ErrUnavailable; a refusal, a conflict or a missing table
// does not.
func TestUnavailable(t *testing.T) {
	status := func(code int) error {
		return &smithyhttp.ResponseError{Response: &smithyhttp.Response{Response: &http.Response{StatusCode: code}}, Err: errors.New("answer")}
	}
	refusedDial := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&types.ProvisionedThroughputExceededException{}, true},
		{&types.RequestLimitExceeded{}, true},
		{&smithy.GenericAPIError{Code: "ThrottlingException"}, true},
		{&smithy.GenericAPIError{Code: "InternalServerError"}, true},
		{&smithy.GenericAPIError{Code: "ServiceUnavailable"}, true},
		{status(http.StatusServiceUnavailable), true},
		{status(http.StatusInternalServerError), true},
		{refusedDial, true},
		{&types.ConditionalCheckFailedException{}, false},
		{&types.ResourceNotFoundException{}, false},
		{&smithy.GenericAPIError{Code: "ValidationException"}, false},
		{status(http.StatusBadRequest), false},
		{context.Canceled, false},
	} {
		err := unavail.Mark(storageErr("fencedynamo: acquire \"k\"", "locks", c.err), unavailable)
		if got := errors.Is(err, fence.ErrUnavailable); got != c.want {
			t.Errorf("%T %v: matches fence.ErrUnavailable: %v, want %v", c.err, c.err, got, c.want)
		}
	}
}
