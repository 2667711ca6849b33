package storeurl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceazblob"
)

func init() {
	// The account key is the password of the user info; of a SAS token,
	// the signature is the secret (its other fields say what it allows,
	// and until when).
	register("azblob", scheme{open: openAzblob, hostOptional: true, credentials: []string{"sig"},
		forms: []string{
			"azblob://ACCOUNT.blob.core.windows.net/CONTAINER[?SAS]",
			"azblob:///CONTAINER (with AZURE_STORAGE_CONNECTION_STRING)",
		}})
	register("azblob+http", scheme{open: openAzblob, credentials: []string{"sig"},
		forms: []string{"azblob+http://HOST:PORT/ACCOUNT/CONTAINER (an emulator such as Azurite)"}})
}

// Environment variables the azblob URLs take credentials from, named as
// the Azure CLI names them.
const (
	envAzureConnectionString = "AZURE_STORAGE_CONNECTION_STRING"
	envAzureKey              = "AZURE_STORAGE_KEY"
	envAzureSAS              = "AZURE_STORAGE_SAS_TOKEN"
)

// The account and key every Azure Storage emulator accepts, published by
// Microsoft: no secret.
const (
	emulatorAccount = "devstoreaccount1"
	emulatorKey     = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

// openAzblob opens an Azure Blob container (docs/azblob.md):
//
//	azblob://ACCOUNT.blob.core.windows.net/CONTAINER   the account in the host name
//	azblob://HOST[:PORT]/ACCOUNT/CONTAINER             the account in the path
//	azblob+http://HOST:PORT/ACCOUNT/CONTAINER          plain HTTP, for emulators
//	azblob:///CONTAINER                                all from AZURE_STORAGE_CONNECTION_STRING
//
// The credential is the first of: ACCOUNT:KEY@ in the URL (the key
// percent-encoded), a SAS token as the URL's query, $AZURE_STORAGE_KEY,
// $AZURE_STORAGE_SAS_TOKEN, and for the emulators' account
// devstoreaccount1 its published key.
func openAzblob(_ context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	opts := fenceazblob.ClientOptions()
	opts.Transport = &http.Client{Transport: tr}
	closer := idleCloser{tr}

	t, err := parseAzure(u, "azblob", "CONTAINER", checkContainerName)
	if err != nil {
		return nil, nil, err
	}
	if t.connString != "" {
		c, err := container.NewClientFromConnectionString(t.connString, t.name, opts)
		if err != nil {
			// The SDK's message may quote the connection string.
			return nil, nil, fmt.Errorf("%s is not a usable connection string", envAzureConnectionString)
		}
		return fenceazblob.New(c), closer, nil
	}
	var c *container.Client
	switch {
	case t.key != "":
		cred, cerr := container.NewSharedKeyCredential(t.account, t.key)
		if cerr != nil {
			// Never repeat the key.
			return nil, nil, errors.New("the account key is not valid base64 (percent-encode / + = in a URL)")
		}
		c, err = container.NewClientWithSharedKeyCredential(t.endpoint, cred, opts)
	default:
		c, err = container.NewClientWithNoCredential(t.endpoint+"?"+t.sas, opts)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("azure blob container client: %w", err)
	}
	return fenceazblob.New(c), closer, nil
}

// checkContainerName applies Azure's rules for container names.
func checkContainerName(name string) error {
	bad := len(name) < 3 || len(name) > 63 || name[0] == '-' || name[len(name)-1] == '-' || strings.Contains(name, "--")
	for _, c := range name {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			bad = true
		}
	}
	if bad {
		return fmt.Errorf("container name %q: want 3 to 63 lower-case letters, digits and single dashes", name)
	}
	return nil
}

// idleCloser closes the idle connections of a store's own transport.
type idleCloser struct{ tr *http.Transport }

func (c idleCloser) Close() error {
	c.tr.CloseIdleConnections()
	return nil
}
