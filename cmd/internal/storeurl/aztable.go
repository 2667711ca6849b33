package storeurl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/Azure/azure-sdk-for-go/sdk/data/aztables"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceaztable"
)

func init() {
	// As for azblob: the account key is the password of the user info; of
	// a SAS token, the signature is the secret.
	register("aztable", scheme{open: openAztable, hostOptional: true, credentials: []string{"sig"},
		forms: []string{
			"aztable://ACCOUNT.table.core.windows.net/TABLE[?SAS]",
			"aztable://ACCOUNT.table.cosmos.azure.com/TABLE (Cosmos DB's Table API)",
			"aztable:///TABLE (with AZURE_STORAGE_CONNECTION_STRING)",
		}})
	register("aztable+http", scheme{open: openAztable, credentials: []string{"sig"},
		forms: []string{"aztable+http://HOST:PORT/ACCOUNT/TABLE (an emulator such as Azurite)"}})
}

// openAztable opens an Azure table (docs/aztable.md), in the forms and
// with the credentials of azblob URLs:
//
//	aztable://ACCOUNT.table.core.windows.net/TABLE   the account in the host name
//	aztable://ACCOUNT.table.cosmos.azure.com/TABLE   Cosmos DB's Table API
//	aztable://HOST[:PORT]/ACCOUNT/TABLE              the account in the path
//	aztable+http://HOST:PORT/ACCOUNT/TABLE           plain HTTP, for emulators
//	aztable:///TABLE                                 all from AZURE_STORAGE_CONNECTION_STRING
//
// The credential is the first of: ACCOUNT:KEY@ in the URL (the key
// percent-encoded), a SAS token as the URL's query, $AZURE_STORAGE_KEY,
// $AZURE_STORAGE_SAS_TOKEN, and for the emulators' account
// devstoreaccount1 its published key.
func openAztable(_ context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	opts := fenceaztable.ClientOptions()
	opts.Transport = &http.Client{Transport: tr}
	closer := idleCloser{tr}

	t, err := parseAzure(u, "aztable", "TABLE", checkTableName)
	if err != nil {
		return nil, nil, err
	}
	if t.connString != "" {
		svc, err := aztables.NewServiceClientFromConnectionString(t.connString, opts)
		if err != nil {
			// The SDK's message may quote the connection string.
			return nil, nil, fmt.Errorf("%s is not a usable connection string", envAzureConnectionString)
		}
		return fenceaztable.New(svc.NewClient(t.name)), closer, nil
	}
	var c *aztables.Client
	switch {
	case t.key != "":
		cred, cerr := aztables.NewSharedKeyCredential(t.account, t.key)
		if cerr != nil {
			// Never repeat the key.
			return nil, nil, errors.New("the account key is not valid base64 (percent-encode / + = in a URL)")
		}
		c, err = aztables.NewClientWithSharedKey(t.endpoint, cred, opts)
	default:
		c, err = aztables.NewClientWithNoCredential(t.endpoint+"?"+t.sas, opts)
	}
	if err != nil {
		// Never repeat the URL: a SAS signature is in it.
		return nil, nil, errors.New("azure table client: the endpoint or SAS token is not usable")
	}
	return fenceaztable.New(c), closer, nil
}

// checkTableName applies Azure's rules for table names.
func checkTableName(name string) error {
	bad := len(name) < 3 || len(name) > 63 || !('a' <= name[0] && name[0] <= 'z' || 'A' <= name[0] && name[0] <= 'Z') ||
		strings.EqualFold(name, "tables")
	for _, c := range name {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9') {
			bad = true
		}
	}
	if bad {
		return fmt.Errorf("table name %q: want 3 to 63 letters and digits, starting with a letter", name)
	}
	return nil
}
