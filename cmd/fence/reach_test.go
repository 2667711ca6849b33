package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence/cmd/internal/storeurl"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestEveryStoreClosedPortAnswersPromptly: a store URL of every network
// scheme that fence help lists, naming a loopback port where nothing
// listens, fails at once, saying "connection refused" and where, as text
// and as JSON; none waits out the 20 s fence gives a store to open.
func TestEveryStoreClosedPortAnswersPromptly(t *testing.T) {
	t.Parallel()
	addr := testserver.ClosedAddr(t)
	// The URL of each scheme, with %[1]s for the closed address.
	urls := map[string]string{
		"azblob":          "azblob://%[1]s/devstoreaccount1/locks?sv=2024-08-04&sig=c2ln",
		"azblob+http":     "azblob+http://%[1]s/devstoreaccount1/locks",
		"aztable":         "aztable://%[1]s/devstoreaccount1/locks?sv=2024-08-04&sig=c2ln",
		"aztable+http":    "aztable+http://%[1]s/devstoreaccount1/locks",
		"dynamodb":        "dynamodb://id:secret@locks?region=us-east-1&endpoint=http://%[1]s",
		"etcd":            "etcd://%[1]s/locks",
		"mysql":           "mysql://app:pw@%[1]s/db",
		"nats":            "nats://%[1]s/locks",
		"postgres":        "postgres://app:pw@%[1]s/db",
		"postgresql":      "postgresql://app:pw@%[1]s/db?mode=session",
		"redis":           "redis://%[1]s",
		"rediss":          "rediss://%[1]s",
		"redis+cluster":   "redis+cluster://%[1]s",
		"rediss+cluster":  "rediss+cluster://%[1]s",
		"redis+sentinel":  "redis+sentinel://%[1]s/mymaster",
		"rediss+sentinel": "rediss+sentinel://%[1]s/mymaster",
		"redlock":         "redlock://%[1]s,%[1]s,%[1]s,%[1]s,%[1]s",
		"zk":              "zk://%[1]s/locks",
	}
	// Every scheme help lists is here, but for the stores on this host and
	// k8s, whose API server's address is in a kubeconfig, not in the URL
	// (not covered here: a leftover of the issue that added it).
	for _, form := range storeurl.Forms() {
		scheme, _, ok := strings.Cut(form, ":")
		switch scheme {
		case "file", "mem", "sqlite", "k8s":
			continue
		}
		if ok && !strings.Contains(scheme, " ") && urls[scheme] == "" {
			t.Errorf("no closed-port case for the store form %s", form)
		}
	}
	e := newEnv(t)
	for scheme, url := range urls {
		t.Run(scheme, func(t *testing.T) {
			t.Parallel()
			url := fmt.Sprintf(url, addr)
			for _, json := range []bool{false, true} {
				args := []string{"status", "--store", url, "--key", "k"}
				if json {
					args = append(args, "--json")
				}
				r := (&env{t: t, store: e.store, home: e.home}).run(args...)
				if r.code != exitError {
					t.Errorf("fence %s: exit %d; want %d", strings.Join(args, " "), r.code, exitError)
				}
				for _, want := range []string{"connection refused", "nothing accepts connections at " + addr} {
					if !strings.Contains(r.stderr, want) {
						t.Errorf("fence %s said:\n%s\nwant %q", strings.Join(args, " "), r.stderr, want)
					}
				}
				// Redis's client retries a refused connection for about 2 s.
				if r.took > 5*time.Second {
					t.Errorf("fence %s took %v; want at once", strings.Join(args, " "), r.took)
				}
			}
		})
	}
}
