package testserver

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
	node := Require(t, "node") // dynalite is a node script
	o := collect(opts)
	o.check(t, "Dynalite", credentials{clock: true})
	dir := dataDir(t, "dynalite")
	guard, err := writeDynaliteGuard(dir, bin)
	if err != nil {
		t.Fatalf("testserver: dynalite: %v", err)
	}
	s := &DynaliteServer{}
	startRetrying(t, "dynalite", func() error {
		port, err := freePort(0)
		if err != nil {
			return err
		}
		s.Process = newProcess(t, dynaliteSpec(node, guard, dir, port, o))
		return s.start()
	})
	return s
}

// dynaliteGuard runs dynalite's command (cli.js, whose path is put in
// for %s) in a process that survives a client aborting a request:
// dynalite 4.0.0 throws from the request's 'error' event, so any client
// that closes a connection with a request half sent (a cancelled
// context) would kill the server, and with it every test on it. Any
// other uncaught error still ends the process.
const dynaliteGuard = `// Written by fence's internal/testkit/testserver: dynalite, kept alive
// when a client aborts a request.
process.on('uncaughtException', function (err) {
  if (err && (err.code === 'ECONNRESET' || err.message === 'aborted')) {
    console.error('testserver: a client aborted a request (' + err.message + '); still serving')
    return
  }
  console.error(err && err.stack ? err.stack : err)
  process.exit(70)
})
require(%s)
`

// writeDynaliteGuard writes the guard for the dynalite command at bin
// (cli.js, or a link to it) into dir and returns its path.
func writeDynaliteGuard(dir, bin string) (string, error) {
	cli, err := filepath.EvalSymlinks(bin)
	if err != nil {
		return "", err
	}
	quoted, err := json.Marshal(cli)
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "dynalite-guard.js")
	return path, os.WriteFile(path, []byte(fmt.Sprintf(dynaliteGuard, quoted)), 0o644)
}

func dynaliteSpec(node, guard, dir string, port int, o options) procSpec {
	url := "http://127.0.0.1:" + strconv.Itoa(port) + "/"
	return procSpec{
		name: "dynalite",
		path: node,
		args: append([]string{
			guard,
			"--host", "127.0.0.1",
			"--port", strconv.Itoa(port),
			"--path", dir + "/db",
			"--createTableMs", "0",
			"--deleteTableMs", "0",
		}, o.args...),
		env:  o.clock.env(),
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
