package storeurl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
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

	if u.Scheme == "aztable" && u.Host == "" {
		name := strings.Trim(u.Path, "/")
		if u.User != nil || u.RawQuery != "" {
			return nil, nil, badURL(u, "aztable:///TABLE takes its account and credential from %s only", envAzureConnectionString)
		}
		if err := checkTableName(name); err != nil {
			return nil, nil, badURL(u, "%v", err)
		}
		cs := os.Getenv(envAzureConnectionString)
		if cs == "" {
			return nil, nil, fmt.Errorf("aztable:///%s takes its account and credential from %s, which is not set", name, envAzureConnectionString)
		}
		svc, err := aztables.NewServiceClientFromConnectionString(cs, opts)
		if err != nil {
			// The SDK's message may quote the connection string.
			return nil, nil, fmt.Errorf("%s is not a usable connection string", envAzureConnectionString)
		}
		return fenceaztable.New(svc.NewClient(name)), closer, nil
	}

	scheme := "https"
	if u.Scheme == "aztable+http" {
		scheme = "http"
	}
	segs := strings.Split(strings.Trim(u.Path, "/"), "/")
	var account, name string
	switch len(segs) {
	case 1: // host-style: the account is the host name's first label
		name = segs[0]
		host := u.Hostname()
		if i := strings.IndexByte(host, '.'); i > 0 && net.ParseIP(host) == nil {
			account = host[:i]
		} else {
			return nil, nil, badURL(u, "name the account in the path: %s://%s/ACCOUNT/TABLE", u.Scheme, u.Host)
		}
	case 2: // path-style, as emulators take it
		account, name = segs[0], segs[1]
	default:
		return nil, nil, badURL(u, "want a table: %s://HOST/TABLE or %s://HOST/ACCOUNT/TABLE", u.Scheme, u.Scheme)
	}
	if err := checkTableName(name); err != nil {
		return nil, nil, badURL(u, "%v", err)
	}
	endpoint := scheme + "://" + u.Host + "/"
	if len(segs) == 2 {
		endpoint += account + "/"
	}
	endpoint += name

	var key, sas string
	if u.User != nil {
		p, ok := u.User.Password()
		if !ok || p == "" {
			return nil, nil, badURL(u, "user info must be ACCOUNT:KEY")
		}
		if user := u.User.Username(); user != "" && user != account {
			return nil, nil, badURL(u, "the key is for account %q, the URL names account %q", user, account)
		}
		key = p
	}
	if u.RawQuery != "" {
		if key != "" {
			return nil, nil, badURL(u, "give a key or a SAS token, not both")
		}
		if !u.Query().Has("sig") {
			return nil, nil, badURL(u, "the query must be a SAS token (sv=...&sig=...)")
		}
		sas = u.RawQuery
	}
	if key == "" && sas == "" {
		key = os.Getenv(envAzureKey)
		sas = strings.TrimPrefix(os.Getenv(envAzureSAS), "?")
		if key != "" {
			sas = ""
		}
	}
	if key == "" && sas == "" && account == emulatorAccount {
		key = emulatorKey
	}

	var c *aztables.Client
	var err error
	switch {
	case key != "":
		cred, cerr := aztables.NewSharedKeyCredential(account, key)
		if cerr != nil {
			// Never repeat the key.
			return nil, nil, errors.New("the account key is not valid base64 (percent-encode / + = in a URL)")
		}
		c, err = aztables.NewClientWithSharedKey(endpoint, cred, opts)
	case sas != "":
		c, err = aztables.NewClientWithNoCredential(endpoint+"?"+sas, opts)
	default:
		return nil, nil, fmt.Errorf("no credential for account %q: give ACCOUNT:KEY@ or a SAS token in the URL, or set %s or %s",
			account, envAzureKey, envAzureSAS)
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
