package storeurl_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"

	"github.com/fencing/fence"
	"github.com/fencing/fence/cmd/internal/storeurl"
	"github.com/fencing/fence/fenceazblob"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// clearAzureEnv keeps the machine's own Azure settings out of a test.
func clearAzureEnv(t *testing.T) {
	for _, v := range []string{"AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_KEY", "AZURE_STORAGE_SAS_TOKEN"} {
		t.Setenv(v, "")
	}
}

func openAzblob(t *testing.T, raw string) *fenceazblob.Store {
	t.Helper()
	drv, closer, err := storeurl.Open(context.Background(), raw)
	if err != nil {
		t.Fatalf("Open(%s): %v", storeurl.Redact(raw), err)
	}
	t.Cleanup(func() { closer.Close() })
	s, ok := drv.(*fenceazblob.Store)
	if !ok {
		t.Fatalf("Open(%s) = %T, want *fenceazblob.Store", storeurl.Redact(raw), drv)
	}
	return s
}

func TestOpenAzblobForms(t *testing.T) {
	clearAzureEnv(t)
	const key = "a2V5a2V5a2V5" // base64, as account keys are
	for raw, want := range map[string]string{
		"azblob://acct.blob.core.windows.net/locks?sv=2024-08-04&sr=c&sp=rwc&sig=c2ln": "https://acct.blob.core.windows.net/locks?",
		"azblob://acct:" + key + "@acct.blob.core.windows.net/locks":                   "https://acct.blob.core.windows.net/locks",
		"azblob://:" + key + "@acct.blob.core.windows.net/locks/":                      "https://acct.blob.core.windows.net/locks",
		"azblob://blob.example.com:8443/acct/locks?sig=c2ln":                           "https://blob.example.com:8443/acct/locks?",
		"azblob+http://127.0.0.1:10000/devstoreaccount1/locks":                         "http://127.0.0.1:10000/devstoreaccount1/locks",
		"AZBLOB+HTTP://localhost:10000/devstoreaccount1/locks":                         "http://localhost:10000/devstoreaccount1/locks",
	} {
		s := openAzblob(t, raw)
		if got := s.Container().URL(); !strings.HasPrefix(got, want) || strings.HasSuffix(want, "locks") && got != want {
			t.Errorf("Open(%s): container %s, want %s", raw, got, want)
		}
	}

	t.Setenv("AZURE_STORAGE_KEY", key)
	if got := openAzblob(t, "azblob://acct.blob.core.windows.net/locks").Container().URL(); got != "https://acct.blob.core.windows.net/locks" {
		t.Errorf("with AZURE_STORAGE_KEY: container %s", got)
	}
	t.Setenv("AZURE_STORAGE_KEY", "")
	t.Setenv("AZURE_STORAGE_SAS_TOKEN", "?sv=2024-08-04&sig=c2ln")
	if got := openAzblob(t, "azblob://acct.blob.core.windows.net/locks").Container().URL(); !strings.HasPrefix(got, "https://acct.blob.core.windows.net/locks?") {
		t.Errorf("with AZURE_STORAGE_SAS_TOKEN: container %s", got)
	}

	t.Setenv("AZURE_STORAGE_CONNECTION_STRING",
		"DefaultEndpointsProtocol=http;AccountName=acct;AccountKey="+key+";BlobEndpoint=http://127.0.0.1:10000/acct;")
	for _, raw := range []string{"azblob:///locks"} {
		if got := openAzblob(t, raw).Container().URL(); got != "http://127.0.0.1:10000/acct/locks" {
			t.Errorf("Open(%s) with a connection string: container %s", raw, got)
		}
	}
}

func TestOpenAzblobErrors(t *testing.T) {
	clearAzureEnv(t)
	for _, raw := range []string{
		"azblob://acct.blob.core.windows.net",
		"azblob://acct.blob.core.windows.net/",
		"azblob://acct.blob.core.windows.net/Bad_Name",
		"azblob://acct.blob.core.windows.net/ab",
		"azblob://acct.blob.core.windows.net/a--b",
		"azblob://acct.blob.core.windows.net/acct/locks/more",
		"azblob://127.0.0.1:10000/locks",
		"azblob://acct.blob.core.windows.net/locks?timeout=5",
		"azblob://acct:hunter2@acct.blob.core.windows.net/locks?sig=hunter2",
		"azblob://other:hunter2@acct.blob.core.windows.net/locks",
		"azblob://acct@acct.blob.core.windows.net/locks",
		"azblob:///Locks",
		"azblob:///locks?sig=hunter2",
		"azblob+http:///locks",
		"azblob:locks",
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

	// Well-formed, but unusable: not bad URLs, and still no credential shown.
	for raw, want := range map[string]string{
		"azblob://acct.blob.core.windows.net/locks": "AZURE_STORAGE_KEY",
		"azblob:///locks": "AZURE_STORAGE_CONNECTION_STRING",
		"azblob://acct:hunter2@acct.blob.core.windows.net/xyz": "base64",
	} {
		_, _, err := storeurl.Open(context.Background(), raw)
		if err == nil || errors.Is(err, storeurl.ErrBadURL) || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%q) = %v; want an open error naming %s, without the credential", raw, err, want)
		}
	}
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "AccountKey=hunter2;nonsense")
	if _, _, err := storeurl.Open(context.Background(), "azblob:///locks"); err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("Open with a bad connection string: %v; want an error without the key", err)
	}
}

// TestAzblobUnreachableHidesSAS: an error talking to the service never
// shows the SAS token's signature, which the SDK keeps in the URL.
func TestAzblobUnreachableHidesSAS(t *testing.T) {
	clearAzureEnv(t)
	s := openAzblob(t, "azblob+http://127.0.0.1:1/devstoreaccount1/locks?sv=2024-08-04&sig=hunter2")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := fence.New(s, fence.WithTTL(15*time.Second)).TryAcquire(ctx, "k")
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("TryAcquire on an unreachable endpoint: %v; want an error without the signature", err)
	}
}

// TestOpenAzblobAzurite opens every form against a private Azurite and
// takes a lease through each.
func TestOpenAzblobAzurite(t *testing.T) {
	clearAzureEnv(t)
	az := testserver.Azurite(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	host := az.Addr()

	// A container SAS needs an existing container.
	keyed, err := container.NewClientFromConnectionString(az.ConnectionString(), "with-sas", fenceazblob.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := keyed.Create(ctx, nil); err != nil {
		t.Fatal(err)
	}
	sasURL, err := keyed.GetSASURL(sas.ContainerPermissions{Read: true, Write: true, Create: true, List: true}, time.Now().Add(time.Hour), nil)
	if err != nil {
		t.Fatal(err)
	}
	su, _ := url.Parse(sasURL)

	forms := []string{
		"azblob+http://" + testserver.AzuriteAccount + ":" + url.QueryEscape(testserver.AzuriteKey) + "@" + host + "/devstoreaccount1/with-key",
		"azblob+http://" + host + "/devstoreaccount1/with-emulator-key",
		"azblob+http://" + host + "/devstoreaccount1/with-sas?" + su.RawQuery,
		"azblob:///with-connection-string",
	}
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", az.ConnectionString())
	for _, raw := range forms {
		c := fence.New(openAzblob(t, raw), fence.WithTTL(15*time.Second))
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
			if err := l.Release(ctx); err != nil {
				t.Errorf("%s: Release: %v", storeurl.Redact(raw), err)
			}
		}
	}
}
