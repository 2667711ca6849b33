package storeurl_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/fencing/fence"
	"github.com/fencing/fence/cmd/internal/storeurl"
	"github.com/fencing/fence/fenceaztable"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func openAztable(t *testing.T, raw string) *fenceaztable.Store {
	t.Helper()
	drv, closer, err := storeurl.Open(context.Background(), raw)
	if err != nil {
		t.Fatalf("Open(%s): %v", storeurl.Redact(raw), err)
	}
	t.Cleanup(func() { closer.Close() })
	s, ok := drv.(*fenceaztable.Store)
	if !ok {
		t.Fatalf("Open(%s) = %T, want *fenceaztable.Store", storeurl.Redact(raw), drv)
	}
	return s
}

func TestOpenAztableForms(t *testing.T) {
	clearAzureEnv(t)
	const key = "a2V5a2V5a2V5" // base64, as account keys are
	// Each opens a store (the Azurite test below reaches the endpoints).
	for _, raw := range []string{
		"aztable://acct.table.core.windows.net/locks?sv=2024-08-04&sp=raud&sig=c2ln",
		"aztable://acct:" + key + "@acct.table.core.windows.net/locks",
		"aztable://:" + key + "@acct.table.cosmos.azure.com/Locks/",
		"aztable://table.example.com:8443/acct/locks?sig=c2ln",
		"aztable+http://127.0.0.1:10002/devstoreaccount1/locks",
		"AZTABLE+HTTP://localhost:10002/devstoreaccount1/locks",
	} {
		openAztable(t, raw)
	}
	t.Setenv("AZURE_STORAGE_KEY", key)
	openAztable(t, "aztable://acct.table.core.windows.net/locks")
	t.Setenv("AZURE_STORAGE_KEY", "")
	t.Setenv("AZURE_STORAGE_SAS_TOKEN", "?sv=2024-08-04&sig=c2ln")
	openAztable(t, "aztable://acct.table.core.windows.net/locks")
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING",
		"DefaultEndpointsProtocol=http;AccountName=acct;AccountKey="+key+";TableEndpoint=http://127.0.0.1:10002/acct;")
	openAztable(t, "aztable:///locks")
}

func TestOpenAztableErrors(t *testing.T) {
	clearAzureEnv(t)
	for _, raw := range []string{
		"aztable://acct.table.core.windows.net",
		"aztable://acct.table.core.windows.net/",
		"aztable://acct.table.core.windows.net/bad_name",
		"aztable://acct.table.core.windows.net/ab",
		"aztable://acct.table.core.windows.net/1locks",
		"aztable://acct.table.core.windows.net/Tables",
		"aztable://acct.table.core.windows.net/acct/locks/more",
		"aztable://127.0.0.1:10002/locks",
		"aztable://acct.table.core.windows.net/locks?timeout=5",
		"aztable://acct:hunter2@acct.table.core.windows.net/locks?sig=hunter2",
		"aztable://other:hunter2@acct.table.core.windows.net/locks",
		"aztable://acct@acct.table.core.windows.net/locks",
		"aztable:///lo-cks",
		"aztable:///locks?sig=hunter2",
		"aztable+http:///locks",
		"aztable:locks",
	} {
		_, _, err := storeurl.Open(context.Background(), raw)
		if !errors.Is(err, storeurl.ErrBadURL) {
			t.Errorf("Open(%q) = %v, want ErrBadURL", raw, err)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "hunter2") {
			t.Errorf("Open(%q): %s; want no credential", raw, msg)
		}
	}
	for raw, want := range map[string]string{
		"aztable://acct.table.core.windows.net/locks":            "AZURE_STORAGE_KEY",
		"aztable:///locks":                                       "AZURE_STORAGE_CONNECTION_STRING",
		"aztable://acct:hunter2@acct.table.core.windows.net/xyz": "base64",
	} {
		_, _, err := storeurl.Open(context.Background(), raw)
		if err == nil || errors.Is(err, storeurl.ErrBadURL) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q) = %v; want an open error naming %s, without the credential", raw, err, want)
		}
	}
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "AccountKey=hunter2;nonsense")
	if _, _, err := storeurl.Open(context.Background(), "aztable:///locks"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Open with a bad connection string: %v; want an error without the key", err)
	}
	if got := storeurl.Redact("aztable://acct:hunter2@acct.table.core.windows.net/locks"); strings.Contains(got, "hunter2") {
		t.Errorf("Redact shows the key: %s", got)
	}
	if got := storeurl.Redact("aztable://acct.table.core.windows.net/locks?sv=1&sig=hunter2"); strings.Contains(got, "hunter2") {
		t.Errorf("Redact shows the SAS signature: %s", got)
	}
}

// TestAztableUnreachableHidesSAS: an error talking to the service never
// shows the SAS token's signature, which the SDK keeps in the URL.
func TestAztableUnreachableHidesSAS(t *testing.T) {
	clearAzureEnv(t)
	s := openAztable(t, "aztable+http://127.0.0.1:1/devstoreaccount1/locks?sv=2024-08-04&sig=hunter2")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := fence.New(s, fence.WithTTL(time.Second)).TryAcquire(ctx, "k")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("TryAcquire on an unreachable endpoint: %v; want an error without the signature", err)
	}
}

// TestOpenAztableAzurite opens every form against a private Azurite
// Table service and takes a lease through each, listing and inspecting it.
func TestOpenAztableAzurite(t *testing.T) {
	clearAzureEnv(t)
	az := testserver.AzuriteTable(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	host := az.Addr()

	// A table SAS needs an existing table.
	svc, err := aztables.NewServiceClientFromConnectionString(az.ConnectionString(), fenceaztable.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	keyed := svc.NewClient("withsas")
	if _, err := keyed.CreateTable(ctx, nil); err != nil {
		t.Fatal(err)
	}
	sasURL, err := keyed.GetTableSASURL(aztables.SASPermissions{Read: true, Add: true, Update: true, Delete: true},
		time.Now().Add(-time.Minute), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	su, _ := url.Parse(sasURL)

	forms := []string{
		"aztable+http://" + testserver.AzuriteAccount + ":" + url.QueryEscape(testserver.AzuriteKey) + "@" + host + "/devstoreaccount1/withkey",
		"aztable+http://" + host + "/devstoreaccount1/withemulatorkey",
		"aztable+http://" + host + "/devstoreaccount1/withsas?" + su.RawQuery,
		"aztable:///withconnectionstring",
	}
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", az.ConnectionString())
	for _, raw := range forms {
		c := fence.New(openAztable(t, raw), fence.WithTTL(2*time.Second))
		var last int64
		for range 2 {
			l, err := c.TryAcquire(ctx, "jobs/nightly")
			if err != nil {
				t.Fatalf("%s: TryAcquire: %v", storeurl.Redact(raw), err)
			}
			if l.Token() <= last {
				t.Errorf("%s: token %d after %d", storeurl.Redact(raw), l.Token(), last)
			}
			last = l.Token()
			if hs, err := c.List(ctx, ""); err != nil || len(hs) != 1 || hs[0].Token != last {
				t.Errorf("%s: List = %+v, %v", storeurl.Redact(raw), hs, err)
			}
			if h, err := c.Inspect(ctx, "jobs/nightly"); err != nil || h.Token != last {
				t.Errorf("%s: Inspect = %+v, %v", storeurl.Redact(raw), h, err)
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("%s: Release: %v", storeurl.Redact(raw), err)
			}
		}
	}
}
