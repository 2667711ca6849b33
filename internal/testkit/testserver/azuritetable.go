package testserver

import (
	"fmt"
	"os"
	"path/filepath"
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
	o.check(t, "AzuriteTable", credentials{clock: true})
	dir := dataDir(t, "azurite-table")
	s := &AzuriteTableServer{}
	startRetrying(t, "azurite-table", func() error {
		port, err := freePort(0)
		if err != nil {
			return err
		}
		s.Process = newProcess(t, azuriteSpec("azurite-table", bin, "table", dir, port, "/Tables", o))
		return s.start()
	})
	return s
}
