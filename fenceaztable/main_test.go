package fenceaztable_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/fencing/fence/fenceaztable"
	"github.com/fencing/fence/internal/testkit/leakcheck"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m, testserver.IgnoreLeaks())
}

// open opens a store from a connect string made by the harness's Server:
// its own table client with its own connections, which close closes.
func open(connect string) (*fenceaztable.Store, func() error, error) {
	name, cs, ok := strings.Cut(connect, "|")
	if !ok {
		return nil, nil, fmt.Errorf("bad connect string %q", connect)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	opts := fenceaztable.ClientOptions()
	opts.Transport = &http.Client{Transport: tr}
	svc, err := aztables.NewServiceClientFromConnectionString(cs, opts)
	if err != nil {
		return nil, nil, err
	}
	return fenceaztable.New(svc.NewClient(name)), func() error { tr.CloseIdleConnections(); return nil }, nil
}
