package storeurl

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestMistypedStoreIsAnError: a value that is neither a path nor a URL
// naming its server is an error, never the file store somewhere or a
// server on localhost.
func TestMistypedStoreIsAnError(t *testing.T) {
	for _, raw := range []string{
		"127.0.0.1:6379",         // host:port without a scheme
		"myredis",                // a name
		"redis//127.0.0.1:6379",  // the colon forgotten
		"redis:/127.0.0.1:6379",  // a slash forgotten: a path, no host
		"redis:127.0.0.1:6379",   // opaque
		"redis:",                 // no host
		"redis://",               // no host
		"redis://:6379",          // a port, no host
		"redis://u:pw@",          // credentials, no host
		"localhost:6379",         // "localhost" is no scheme
		"redis+cluster://h1,,h2", // an empty host in a list
		"redlock://h1:6379,:6379",
		"//127.0.0.1:6379",           // a URL without its scheme
		"locks",                      // a relative path without ./
		"var/lib/fence",              // likewise
		"~bob/locks",                 // ~user is not expanded
		"REDIS:host:6379",            // opaque, in capitals
		"redis://host:6379#frag",     // a fragment
		"redis://h:6379/?a=1;b=2",    // ';' in the query
		"redis://h:6379/?prefix=%zz", // a bad escape
		"redis://u:12?ss@h:6379",     // a password's '?' unencoded
		"redis://u:12/ss@h:6379",     // a password's '/' unencoded
		"nosuch://host",              // unknown scheme
	} {
		u, err := Parse(raw)
		if !errors.Is(err, ErrBadURL) {
			t.Errorf("Parse(%q) = %v, %v; want ErrBadURL", raw, u, err)
			continue
		}
		var ue *URLError
		if !errors.As(err, &ue) || ue.Want == "" {
			t.Errorf("Parse(%q): %v; want the accepted forms in brief", raw, err)
		}
		if strings.Contains(err.Error(), "\n") || len(err.Error()) > 300 {
			t.Errorf("Parse(%q): not one short line: %s", raw, err)
		}
		if _, _, oerr := Open(context.Background(), raw); !errors.Is(oerr, ErrBadURL) {
			t.Errorf("Open(%q) = %v; want ErrBadURL", raw, oerr)
		}
	}
}

// TestNetworkSchemesNeedHost: every registered scheme of a network store
// refuses a URL that does not name its server, in every host-less form,
// before dialling anything; a scheme whose server comes from the
// environment (k8s) takes "k8s:" and "k8s://" but refuses the others.
func TestNetworkSchemesNeedHost(t *testing.T) {
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	mu.RLock()
	var names []string
	for n, s := range schemes {
		if !s.local {
			names = append(names, n)
		}
	}
	mu.RUnlock()
	slices.Sort(names)
	for _, want := range []string{"redis", "rediss", "redis+cluster", "rediss+cluster", "redlock", "redis+sentinel",
		"rediss+sentinel", "postgres", "postgresql", "mysql", "etcd", "zk", "nats", "azblob", "azblob+http",
		"aztable", "aztable+http"} {
		if !slices.Contains(names, want) {
			t.Errorf("scheme %s is not registered", want)
		}
	}
	for _, n := range names {
		for _, raw := range []string{
			n + ":",
			n + "://",
			n + ":127.0.0.1:1",
			n + ":127.0.0.1:1/x",
			n + "://:1/x",
			n + "://u:hunter2@",
			n + "://u:hunter2@/x",
			n + ":u:hunter2@127.0.0.1:1/x",
		} {
			if schemes[n].hostless && (raw == n+":" || raw == n+"://") {
				continue
			}
			_, _, err := Open(context.Background(), raw)
			if !errors.Is(err, ErrBadURL) {
				t.Errorf("Open(%q) = %v; want ErrBadURL", raw, err)
				continue
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("Open(%q): the password shows: %v", raw, err)
			}
			if u, _ := url.Parse(raw); u.Opaque != "" && !strings.Contains(err.Error(), `no // after`) {
				t.Errorf("Open(%q) = %v; want it to say the URL has no //", raw, err)
			}
		}
	}
}

func TestParseForms(t *testing.T) {
	for raw, want := range map[string]string{
		"/var/lib/fence":                   "file:///var/lib/fence",
		"file:///var/lib/fence":            "file:///var/lib/fence",
		"redis://127.0.0.1:6379/0":         "redis://127.0.0.1:6379/0",
		"REDIS://h:1":                      "redis://h:1",
		"redlock://h1:1,h2:2,10.0.0.3:3":   "redlock://h1:1,h2:2,10.0.0.3:3",
		"redis://[::1]:6379":               "redis://[::1]:6379",
		"mysql://u@/db?socket=/run/x.sock": "mysql://u@/db?socket=/run/x.sock",
		"azblob:///container":              "azblob:///container",
		"mem:":                             "mem:",
		"mem:name":                         "mem:name",
	} {
		u, err := Parse(raw)
		if err != nil || u.String() != want {
			t.Errorf("Parse(%q) = %v, %v; want %s", raw, u, err, want)
		}
	}
}

// TestRedact: credentials are replaced where the URL's structure puts
// them, and only there; everything else is shown as given.
func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		// A password "1" leaves the host alone.
		"redis://:1@127.0.0.1:6379/0?token_retention=bogus": "redis://:xxxxx@127.0.0.1:6379/0?token_retention=bogus",
		"redis://u:1@127.0.0.1:6379":                        "redis://u:xxxxx@127.0.0.1:6379",
		// A user without a password is a user, except for NATS (a token).
		"redis://app@h:6379":                            "redis://app@h:6379",
		"nats://s3cret-token@127.0.0.1:4222/b":          "nats://xxxxx@127.0.0.1:4222/b",
		"nats://user:s3cret@127.0.0.1:4222/b":           "nats://user:xxxxx@127.0.0.1:4222/b",
		"nats://h:4222/b?token=s3cret":                  "nats://h:4222/b?token=xxxxx",
		"postgres://bob:hunter2@db/app?sslmode=disable": "postgres://bob:xxxxx@db/app?sslmode=disable",
		// Known credential parameters by name; the others as given, in
		// their order and encoding.
		"postgres://bob@db/app?password=hunter2&tokens_table=t2&sslpassword=k%26y":   "postgres://bob@db/app?password=xxxxx&tokens_table=t2&sslpassword=xxxxx",
		"postgres://db/app?PASSWORD=hunter2":                                         "postgres://db/app?PASSWORD=xxxxx",
		"redis+sentinel://:pw@s1:26379/m?sentinel_password=spw&sentinel_username=su": "redis+sentinel://:xxxxx@s1:26379/m?sentinel_password=xxxxx&sentinel_username=su",
		"redis://h?client_name=key-pass-token&token_retention=1h":                    "redis://h?client_name=key-pass-token&token_retention=1h",
		"azblob://acct.blob.core.windows.net/c?sv=2024-08-04&sig=a%2Bb&se=2030":      "azblob://acct.blob.core.windows.net/c?sv=2024-08-04&sig=xxxxx&se=2030",
		"azblob+http://acct:a2V5@127.0.0.1:10000/acct/c":                             "azblob+http://acct:xxxxx@127.0.0.1:10000/acct/c",
		"mysql://root:hunter2@127.0.0.1:3306/test?table=tokens":                      "mysql://root:xxxxx@127.0.0.1:3306/test?table=tokens",
		"etcd://u:p@h1:2379,h2:2379/prefix":                                          "etcd://u:xxxxx@h1:2379,h2:2379/prefix",
		// ';' separates parameters for some parsers.
		"postgres://db/app?a=1;password=hunter2": "postgres://db/app?a=1;password=xxxxx",
		// Unknown schemes: the whole user info and every value.
		"bogus://tok@h/x?a=1&b=2": "bogus://xxxxx@h/x?a=xxxxx&b=xxxxx",
		"//u:pw@h":                "//xxxxx@h",
		// Opaque forms and values without a scheme: the user info before
		// the '@'.
		"redis:u:pw@h:6379":    "redis:xxxxx@h:6379",
		"u:pw@h:6379":          "u:xxxxx@h:6379",
		":pw@h:6379":           "xxxxx@h:6379",
		"redis:127.0.0.1:6379": "redis:127.0.0.1:6379",
		"mem:":                 "mem:",
		"redis://":             "redis://",
		"redis:":               "redis:",
		// Unparsable, or cut by an unencoded '/', '?' or '#' in the
		// password: only the scheme.
		"redis://u:pa/ss@h:6379":      "redis://xxxxx",
		"redis://u:12?ss@h:6379":      "redis://xxxxx",
		"redis://:12#ss@h:6379":       "redis://xxxxx",
		"mysql://root:hunter2@[::1/x": "mysql://xxxxx",
		"redis://h:6379#frag":         "redis://h:6379#xxxxx",
		// Paths as they are.
		"/var/lib/fence":        "/var/lib/fence",
		"./locks":               "./locks",
		"file:///var/lib/fence": "file:///var/lib/fence",
		"":                      "",
	} {
		if got := Redact(raw); got != want {
			t.Errorf("Redact(%q) = %q; want %q", raw, got, want)
		}
	}
}

// TestPgxErrorWithoutConnString: pgx's parse errors quote the whole
// connection string, masking the passwords it recognizes; fence leaves
// the string out (its message names the URL, redacted, once).
func TestPgxErrorWithoutConnString(t *testing.T) {
	raw := "postgres://app:pw1@127.0.0.1:1/db?sslpassword=pw3&connect_timeout=later&tokens_table=t2"
	_, _, err := Open(context.Background(), raw)
	if !errors.Is(err, ErrBadURL) {
		t.Fatalf("Open(%q) = %v; want ErrBadURL", raw, err)
	}
	msg := err.Error()
	if strings.Count(msg, "127.0.0.1:1") != 1 || strings.Contains(msg, "cannot parse") ||
		!strings.Contains(msg, `invalid connect_timeout (strconv.ParseInt: parsing "later": invalid syntax)`) {
		t.Errorf("Open(%q): %s; want the URL once, redacted, and pgx's reason", raw, msg)
	}
}
