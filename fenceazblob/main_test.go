package fenceazblob_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/fencing/fence/internal/testkit/leakcheck"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/fencing/fence/fenceazblob"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m, testserver.IgnoreLeaks())
}

// server starts a private Azurite and returns the connect string of a new
// container on it (not created yet: the store creates it).
func server(t *testing.T) string {
	t.Helper()
	connect, _ := serverProcess(t)
	return connect
}

func serverProcess(t *testing.T) (string, *testserver.AzuriteServer) {
	t.Helper()
	az := testserver.Azurite(t)
	return testserver.Name("fence-") + "|" + az.ConnectionString(), az
}

// open opens a store from a connect string made by server: its own
// container client with its own connections, which close closes.
func open(connect string) (*fenceazblob.Store, func() error, error) {
	name, cs, ok := strings.Cut(connect, "|")
	if !ok {
		return nil, nil, fmt.Errorf("bad connect string %q", connect)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	opts := fenceazblob.ClientOptions()
	opts.Transport = &http.Client{Transport: tr}
	c, err := container.NewClientFromConnectionString(cs, name, opts)
	if err != nil {
		return nil, nil, err
	}
	return fenceazblob.New(c), func() error { tr.CloseIdleConnections(); return nil }, nil
}

func mustOpen(t *testing.T, connect string) *fenceazblob.Store {
	t.Helper()
	s, closeFn, err := open(connect)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = closeFn() })
	return s
}
