package storeurl

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
)

// azureTarget is what an Azure Storage URL (azblob, aztable) names: either
// a resource whose account and credential come from the connection
// string (connString set), or an endpoint with a shared key or a SAS.
type azureTarget struct {
	name       string // the container or table
	connString string // for SCHEME:///NAME

	account, endpoint string
	key, sas          string // exactly one is set
}

// parseAzure reads u, of scheme base or base+http, naming a what
// ("CONTAINER", "TABLE") that check accepts. The credential is the first
// of: ACCOUNT:KEY@ in the URL, a SAS token as its query, $AZURE_STORAGE_KEY,
// $AZURE_STORAGE_SAS_TOKEN, and for the emulators' account its published
// key. Errors never repeat a key or a SAS signature.
func parseAzure(u *url.URL, base, what string, check func(string) error) (azureTarget, error) {
	var t azureTarget
	if u.Scheme == base && u.Host == "" {
		t.name = strings.Trim(u.Path, "/")
		if u.User != nil || u.RawQuery != "" {
			return t, badURL(u, "%s:///%s takes its account and credential from %s only", base, what, envAzureConnectionString)
		}
		if err := check(t.name); err != nil {
			return t, badURL(u, "%v", err)
		}
		t.connString = os.Getenv(envAzureConnectionString)
		if t.connString == "" {
			return t, fmt.Errorf("%s:///%s takes its account and credential from %s, which is not set", base, t.name, envAzureConnectionString)
		}
		return t, nil
	}

	scheme := "https"
	if u.Scheme == base+"+http" {
		scheme = "http"
	}
	segs := strings.Split(strings.Trim(u.Path, "/"), "/")
	switch len(segs) {
	case 1: // host-style: the account is the host name's first label
		t.name = segs[0]
		host := u.Hostname()
		if i := strings.IndexByte(host, '.'); i > 0 && net.ParseIP(host) == nil {
			t.account = host[:i]
		} else {
			return t, badURL(u, "name the account in the path: %s://%s/ACCOUNT/%s", u.Scheme, u.Host, what)
		}
	case 2: // path-style, as emulators and custom endpoints take it
		t.account, t.name = segs[0], segs[1]
	default:
		return t, badURL(u, "want a %s: %s://HOST/%s or %s://HOST/ACCOUNT/%s",
			strings.ToLower(what), u.Scheme, what, u.Scheme, what)
	}
	if err := check(t.name); err != nil {
		return t, badURL(u, "%v", err)
	}
	t.endpoint = scheme + "://" + u.Host + "/"
	if len(segs) == 2 {
		t.endpoint += t.account + "/"
	}
	t.endpoint += t.name

	if u.User != nil {
		p, ok := u.User.Password()
		if !ok || p == "" {
			return t, badURL(u, "user info must be ACCOUNT:KEY")
		}
		if user := u.User.Username(); user != "" && user != t.account {
			return t, badURL(u, "the key is for account %q, the URL names account %q", user, t.account)
		}
		t.key = p
	}
	if u.RawQuery != "" {
		if t.key != "" {
			return t, badURL(u, "give a key or a SAS token, not both")
		}
		if !u.Query().Has("sig") {
			return t, badURL(u, "the query must be a SAS token (sv=...&sig=...)")
		}
		t.sas = u.RawQuery
	}
	if t.key == "" && t.sas == "" {
		t.key = os.Getenv(envAzureKey)
		t.sas = strings.TrimPrefix(os.Getenv(envAzureSAS), "?")
		if t.key != "" {
			t.sas = ""
		}
	}
	if t.key == "" && t.sas == "" && t.account == emulatorAccount {
		t.key = emulatorKey
	}
	if t.key == "" && t.sas == "" {
		return t, fmt.Errorf("no credential for account %q: give ACCOUNT:KEY@ or a SAS token in the URL, or set %s or %s",
			t.account, envAzureKey, envAzureSAS)
	}
	return t, nil
}
