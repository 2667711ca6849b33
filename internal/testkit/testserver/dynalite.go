package testserver

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// Static credentials and region for the AWS SDK against dynalite, which
// checks that a request is signed but not with what.
const (
	DynaliteRegion    = "us-east-1"
	DynaliteAccessKey = "fence"
	DynaliteSecretKey = "fence-dynalite"
)

// DynaliteVersion is the version of dynalite scripts/test installs.
const DynaliteVersion = dynaliteVersion

// DynaliteServer is a private dynalite (a DynamoDB implementation on
// LevelDB) keeping its data in its own directory, so that it survives a
// restart.
type DynaliteServer struct {
	*Process
}

// Endpoint returns the server's endpoint URL, "http://127.0.0.1:port".
func (s *DynaliteServer) Endpoint() string { return "http://" + s.Addr() }

// Dynalite starts dynalite (installed by scripts/test into
// RepoRoot()/.tools, or $FENCE_DYNALITE, or on PATH) on a free loopback
// port and waits until it answers HTTP as dynalite. Its tables become
// active at once (the real service takes seconds).
func Dynalite(t testing.TB, opts ...Option) *DynaliteServer {
	t.Helper()
	bin := Require(t, "dynalite")
	Require(t, "node") // dynalite is a node script
	o := collect(opts)
	dir := dataDir(t, "dynalite")
	s := &DynaliteServer{}
	startRetrying(t, "dynalite", func() error {
		port, err := freePort(0)
		if err != nil {
			return err
		}
		s.Process = newProcess(t, dynaliteSpec(bin, dir, port, o.args))
		return s.start()
	})
	return s
}

func dynaliteSpec(bin, dir string, port int, args []string) procSpec {
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/"
	return procSpec{
		name: "dynalite",
		path: bin,
		args: append([]string{
			"--host", "127.0.0.1",
			"--port", strconv.Itoa(port),
			"--path", dir + "/db",
			"--createTableMs", "0",
			"--deleteTableMs", "0",
		}, args...),
		dir:  dir,
		port: port,
		ping: func(ctx context.Context) error {
			body, err := httpGet(ctx, url, nil)
			if err == nil && !strings.HasPrefix(body, "healthy: ") {
				err = fmt.Errorf("answer %.60q, not dynalite's", body)
			}
			return err
		},
	}
}
