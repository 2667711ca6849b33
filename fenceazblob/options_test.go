package fenceazblob_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/fencing/fence/fenceazblob"
)

// ClientOptions gives up on a failing service after a few quick tries,
// where the SDK's defaults would retry with delays growing to a minute.
func TestClientOptionsRetryLittle(t *testing.T) {
	var tries atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tries.Add(1)
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c, err := container.NewClientWithNoCredential(srv.URL+"/account/locks", fenceazblob.ClientOptions())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	if _, err := c.GetProperties(ctx, nil); err == nil {
		t.Fatal("GetProperties against a service answering 503: no error")
	}
	if n, took := tries.Load(), time.Since(start); n != 3 || took > 5*time.Second {
		t.Errorf("%d tries in %v; want 3 (two retries) within seconds", n, took)
	}
}
