package storeurl_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/cmd/internal/storeurl"
	"github.com/fencing/fence/fencedynamo"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// clearAWSEnv keeps the machine's AWS settings out of a test.
func clearAWSEnv(t *testing.T) {
	for _, v := range []string{"AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
		"AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_DYNAMODB", "AWS_CA_BUNDLE"} {
		t.Setenv(v, "")
	}
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

func openDynamo(t *testing.T, raw string) *fencedynamo.Store {
	t.Helper()
	drv, closer, err := storeurl.Open(context.Background(), raw)
	if err != nil {
		t.Fatalf("Open(%s): %v", storeurl.Redact(raw), err)
	}
	t.Cleanup(func() { closer.Close() })
	s, ok := drv.(*fencedynamo.Store)
	if !ok {
		t.Fatalf("Open(%s) = %T, want *fencedynamo.Store", storeurl.Redact(raw), drv)
	}
	return s
}

func TestOpenDynamoForms(t *testing.T) {
	clearAWSEnv(t)
	for raw, table := range map[string]string{
		"dynamodb://locks?region=eu-west-1":                                          "locks",
		"dynamodb://id:se%2Fcret@My_Locks.v2?region=us-east-1&create=1":              "My_Locks.v2",
		"dynamodb://id:secret@locks?region=us-east-1&endpoint=http://127.0.0.1:8000": "locks",
		"DYNAMODB://locks/?region=us-east-1&create=0":                                "locks",
	} {
		if s := openDynamo(t, raw); s.Table() != table {
			t.Errorf("Open(%s): table %q, want %q", raw, s.Table(), table)
		}
	}
	t.Setenv("AWS_REGION", "ap-south-1")
	openDynamo(t, "dynamodb://locks")
	// A CA bundle from the environment is honored, not refused.
	t.Setenv("AWS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
	if _, err := os.Stat("/etc/ssl/certs/ca-certificates.crt"); err == nil {
		openDynamo(t, "dynamodb://locks")
	}
}

func TestOpenDynamoErrors(t *testing.T) {
	clearAWSEnv(t)
	for _, raw := range []string{
		"dynamodb://ab?region=us-east-1",
		"dynamodb://lo%20cks?region=us-east-1",
		"dynamodb://locks/more?region=us-east-1",
		"dynamodb://locks?region=us-east-1&timeout=5",
		"dynamodb://locks?region=us-east-1&region=eu-west-1",
		"dynamodb://locks?region=us-east-1&create=maybe",
		"dynamodb://locks?region=us-east-1&endpoint=127.0.0.1:8000",
		"dynamodb://id@locks?region=us-east-1",
		"dynamodb://:hunter2@locks?region=us-east-1",
		"dynamodb:///locks",
		"dynamodb:locks",
	} {
		_, _, err := storeurl.Open(context.Background(), raw)
		if !errors.Is(err, storeurl.ErrBadURL) {
			t.Errorf("Open(%q) = %v, want ErrBadURL", raw, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q): %v; want no credential", raw, err)
		}
	}
	if _, _, err := storeurl.Open(context.Background(), "dynamodb://locks"); err == nil || !strings.Contains(err.Error(), "region") {
		t.Errorf("Open without a region: %v; want an error naming the region", err)
	}
	if got := storeurl.Redact("dynamodb://id:hunter2@locks?region=us-east-1"); strings.Contains(got, "hunter2") {
		t.Errorf("Redact shows the secret: %s", got)
	}
}

// TestOpenDynamoDynalite opens a URL with credentials, endpoint and
// create=1 against a private dynalite and takes a lease through it,
// inspecting and listing it; without create=1 a missing table is an error.
func TestOpenDynamoDynalite(t *testing.T) {
	clearAWSEnv(t)
	d := testserver.Dynalite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := "dynamodb://" + testserver.DynaliteAccessKey + ":" + testserver.DynaliteSecretKey + "@%s?region=" +
		testserver.DynaliteRegion + "&endpoint=" + d.Endpoint()
	absent := openDynamo(t, strings.Replace(base, "%s", "absent", 1))
	if _, err := absent.TryAcquire(ctx, fence.Request{Key: "k", Owner: "o", TTL: time.Second}); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("TryAcquire in a missing table without create=1: %v; want an error saying it does not exist", err)
	}
	s := openDynamo(t, strings.Replace(base, "%s", "locks", 1)+"&create=1")
	c := fence.New(s, fence.WithTTL(2*time.Second))
	l, err := c.TryAcquire(ctx, "jobs/a")
	if err != nil {
		t.Fatal(err)
	}
	if h, err := s.Inspect(ctx, "jobs/a"); err != nil || h.Token != l.Token() {
		t.Errorf("Inspect: %+v, %v; want token %d", h, err, l.Token())
	}
	if hs, err := s.List(ctx, "jobs/"); err != nil || len(hs) != 1 || hs[0].Key != "jobs/a" {
		t.Errorf("List: %+v, %v", hs, err)
	}
	if err := l.Release(ctx); err != nil {
		t.Error(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Error(err)
	}
}
