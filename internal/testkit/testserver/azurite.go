package testserver

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// The development account every Azurite accepts, published by Microsoft
// (it is no secret: it only opens local emulators).
const (
	AzuriteAccount = "devstoreaccount1"
	AzuriteKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// AzuriteServer is a private Azurite Blob service (the Azure Storage
// emulator) keeping its data in its own directory.
type AzuriteServer struct {
	*Process
}

// BlobURL returns the account's blob endpoint,
// "http://127.0.0.1:port/devstoreaccount1".
func (s *AzuriteServer) BlobURL() string {
	return "http://" + s.Addr() + "/" + AzuriteAccount
}

// ConnectionString returns an Azure Storage connection string for the
// development account on this server.
func (s *AzuriteServer) ConnectionString() string {
	return fmt.Sprintf("DefaultEndpointsProtocol=http;AccountName=%s;AccountKey=%s;BlobEndpoint=%s;",
		AzuriteAccount, AzuriteKey, s.BlobURL())
}

// Azurite starts azurite-blob (installed by scripts/test into
// RepoRoot()/.tools, or $FENCE_AZURITE, or on PATH) on a free loopback port
// and waits until it answers HTTP as Azurite.
func Azurite(t testing.TB, opts ...Option) *AzuriteServer {
	t.Helper()
	bin := Require(t, "azurite-blob")
	Require(t, "node") // azurite-blob is a node script
	o := collect(opts)
	o.check(t, "Azurite", credentials{clock: true})
	dir := dataDir(t, "azurite")
	s := &AzuriteServer{}
	startRetrying(t, "azurite-blob", func() error {
		port, err := freePort(0)
		if err != nil {
			return err
		}
		s.Process = newProcess(t, azuriteSpec("azurite-blob", bin, "blob", dir, port, "?comp=list", o))
		return s.start()
	})
	return s
}

// azuriteSpec is the process of one Azurite service (the npm package's
// azurite-blob or azurite-table script at bin) on port, answering HTTP
// as Azurite at the path ping, with o's extra arguments and clock.
func azuriteSpec(name, bin, service, dir string, port int, ping string, o options) procSpec {
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/" + AzuriteAccount + ping
	return procSpec{
		name: name,
		path: bin,
		args: append([]string{
			"--" + service + "Host", "127.0.0.1",
			"--" + service + "Port", strconv.Itoa(port),
			"--location", dir,
			"--skipApiVersionCheck", // newer SDKs send API versions it does not know yet
			"--loose",
			"--disableTelemetry",
		}, o.args...),
		env:  o.clock.env(),
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
	}
}
