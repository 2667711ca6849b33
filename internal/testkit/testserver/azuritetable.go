package testserver

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// AzuriteTableServer is a private Azurite Table service (the Azure
// Storage emulator's tables) keeping its data in its own directory.
type AzuriteTableServer struct {
	*Process
}

// TableURL returns the account's table endpoint,
// "http://127.0.0.1:port/devstoreaccount1".
func (s *AzuriteTableServer) TableURL() string {
	return "http://" + s.Addr() + "/" + AzuriteAccount
}

// ConnectionString returns an Azure Storage connection string for the
// development account on this server.
func (s *AzuriteTableServer) ConnectionString() string {
	return fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;TableEndpoint=%s;",
		AzuriteAccount, AzuriteKey, s.TableURL())
}

// AzuriteTable starts azurite-table, from the same npm package as
// azurite-blob and found beside it (scripts/test installs it into
// RepoRoot()/.tools; or $FENCE_AZURITE_TABLE), on a free loopback port and
// waits until it answers HTTP as Azurite.
func AzuriteTable(t testing.TB, opts ...Option) *AzuriteTableServer {
	t.Helper()
	bin := os.Getenv("FENCE_AZURITE_TABLE")
	if bin == "" {
		bin = filepath.Join(filepath.Dir(Require(t, "azurite-blob")), "azurite-table")
	}
	if !fileExists(bin) {
		Unavailable(t, "testserver: azurite-table not found at %s; install %s, or run scripts/test, which installs every test server",
			bin, installHint["azurite-blob"])
	}
	Require(t, "node") // azurite-table is a node script
	o := collect(opts)
	dir := dataDir(t, "azurite-table")
	s := &AzuriteTableServer{}
	startRetrying(t, "azurite-table", func() error {
		port, err := freePort(0)
		if err != nil {
			return err
		}
		url := "http://127.0.0.1:" + strconv.Itoa(port) + "/" + AzuriteAccount + "/Tables"
		s.Process = newProcess(t, procSpec{
			name: "azurite-table",
			path: bin,
			args: append([]string{
				"--tableHost", "127.0.0.1",
				"--tablePort", strconv.Itoa(port),
				"--location", dir,
				"--skipApiVersionCheck", // newer SDKs send API versions it does not know yet
				"--loose",
				"--disableTelemetry",
			}, o.args...),
			dir:  dir,
			port: port,
			ping: func(ctx context.Context) error {
				_, err := httpGet(ctx, url, func(resp *http.Response) error {
					if !strings.Contains(resp.Header.Get("Server"), "Azurite") {
						return fmt.Errorf("answer from %q, not Azurite", resp.Header.Get("Server"))
					}
					return nil
				})
				return err
			},
		})
		return s.start()
	})
	return s
}
