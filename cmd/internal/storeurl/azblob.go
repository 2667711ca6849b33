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

	if u.Scheme == "azblob" && u.Host == "" {
		name := strings.Trim(u.Path, "/")
		if u.User != nil || u.RawQuery != "" {
			return nil, nil, badURL(u, "azblob:///CONTAINER takes its account and credential from %s only", envAzureConnectionString)
		}
		if err := checkContainerName(name); err != nil {
			return nil, nil, badURL(u, "%v", err)
		}
		cs := os.Getenv(envAzureConnectionString)
		if cs == "" {
			return nil, nil, fmt.Errorf("azblob:///%s takes its account and credential from %s, which is not set", name, envAzureConnectionString)
		}
		c, err := container.NewClientFromConnectionString(cs, name, opts)
		if err != nil {
			// The SDK's message may quote the connection string.
			return nil, nil, fmt.Errorf("%s is not a usable connection string", envAzureConnectionString)
		}
		return fenceazblob.New(c), closer, nil
	}

	scheme := "https"
	if u.Scheme == "azblob+http" {
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
			return nil, nil, badURL(u, "name the account in the path: %s://%s/ACCOUNT/CONTAINER", u.Scheme, u.Host)
		}
	case 2: // path-style, as emulators and custom endpoints take it
		account, name = segs[0], segs[1]
	default:
		return nil, nil, badURL(u, "want a container: %s://HOST/CONTAINER or %s://HOST/ACCOUNT/CONTAINER", u.Scheme, u.Scheme)
	}
	if err := checkContainerName(name); err != nil {
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

	var c *container.Client
	var err error
	switch {
	case key != "":
		cred, cerr := container.NewSharedKeyCredential(account, key)
		if cerr != nil {
			// Never repeat the key.
			return nil, nil, errors.New("the account key is not valid base64 (percent-encode / + = in a URL)")
		}
		c, err = container.NewClientWithSharedKeyCredential(endpoint, cred, opts)
	case sas != "":
		c, err = container.NewClientWithNoCredential(endpoint+"?"+sas, opts)
	default:
		return nil, nil, fmt.Errorf("no credential for account %q: give ACCOUNT:KEY@ or a SAS token in the URL, or set %s or %s",
			account, envAzureKey, envAzureSAS)
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
