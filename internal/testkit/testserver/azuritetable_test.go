package testserver

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestAzuriteTable(t *testing.T) {
	t.Parallel()
	az := timed(t, "azurite-table", func() *AzuriteTableServer { return AzuriteTable(t) })
	checkProcess(t, az.Process)
	if want := "http://" + az.Addr() + "/devstoreaccount1"; az.TableURL() != want {
		t.Errorf("TableURL() = %q, want %q", az.TableURL(), want)
	}
	if !strings.Contains(az.ConnectionString(), "TableEndpoint="+az.TableURL()) {
		t.Errorf("ConnectionString() = %q", az.ConnectionString())
	}
	ctx := testContext(t)
	// The development key must work: create a table, then list it.
	tableDo(t, ctx, http.MethodPost, az.TableURL()+"/Tables", AzuriteKey, []byte(`{"TableName":"fence"}`), http.StatusCreated)
	// A wrong key is refused, so the check above means something.
	tableDo(t, ctx, http.MethodGet, az.TableURL()+"/Tables", base64.StdEncoding.EncodeToString(make([]byte, 64)), nil, http.StatusForbidden)

	az.Kill()
	timed(t, "azurite-table restart", func() any { az.Restart(); return nil })
	tableDo(t, ctx, http.MethodGet, az.TableURL()+"/Tables", AzuriteKey, nil, http.StatusOK)
}

// tableDo sends a Table service request signed with Shared Key Lite for
// the development account and key, failing unless the status is want.
func tableDo(t *testing.T, ctx context.Context, method, rawURL, key string, body []byte, want int) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, rawURL, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	date := time.Now().UTC().Format(http.TimeFormat)
	req.Header.Set("x-ms-version", "2019-02-02")
	req.Header.Set("x-ms-date", date)
	req.Header.Set("Accept", "application/json;odata=nometadata")
	req.Header.Set("Content-Type", "application/json")
	req.ContentLength = int64(len(body))
	u, _ := url.Parse(rawURL)
	k, err := base64.StdEncoding.DecodeString(key)
	if err != nil {
		t.Fatal(err)
	}
	mac := hmac.New(sha256.New, k)
	mac.Write([]byte(date + "\n/" + AzuriteAccount + u.Path))
	req.Header.Set("Authorization", "SharedKeyLite "+AzuriteAccount+":"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s: %s, want %d: %s", method, rawURL, resp.Status, want, b)
	}
	return string(b)
}
