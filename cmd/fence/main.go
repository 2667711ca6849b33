// Command fence runs commands under fenced leases and shows who holds
// which key. See docs/cli.md, or run "fence help".
//
//	fence run [--store URL] --key K [--ttl 60s] [--wait D | --no-wait]
//	          [--hold-at-least D] [--grace 10s] [--json] -- CMD ARGS...
//	fence status [--store URL] --key K [--json]
//	fence list [--store URL] [--prefix P] [--json]
//
// The default store is a per-user directory of lock files
// ($XDG_STATE_HOME/fence, else ~/.local/state/fence); --store or the
// FENCE_STORE environment variable names another.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/storeurl"
)

// Exit codes. CMD's own status passes through "fence run" unchanged.
const (
	exitOK       = 0
	exitError    = 1   // fence itself failed (store unreachable, I/O error)
	exitUsage    = 2   // bad command line
	exitFree     = 3   // fence status: the key is free
	exitHeld     = 75  // EX_TEMPFAIL: the key is held (--no-wait, or --wait ran out)
	exitLost     = 76  // the lease was lost while CMD ran; CMD was stopped
	exitNoExec   = 126 // CMD exists but cannot be executed
	exitNotFound = 127 // CMD not found
)

const usage = `fence runs commands under fenced leases: distributed locks whose every
acquisition carries a fencing token.

Usage:
  fence run [--store URL] --key K [--ttl 60s] [--wait D | --no-wait]
            [--hold-at-least D] [--grace 10s] [--json] -- CMD ARGS...
      Run CMD while holding K. CMD gets FENCE_KEY, FENCE_TOKEN and
      FENCE_OWNER in its environment; send FENCE_TOKEN with every write
      to the protected resource.
  fence status [--store URL] --key K [--json]
      Show who holds K: owner, host, pid, token, time held, time left.
  fence list [--store URL] [--prefix P] [--json]
      Show every held key (starting with P).
  fence help
      Show this help.

Store (--store, else $FENCE_STORE, else the per-user default):
  file:///path/to/dir   lock files in a directory, same host only;
                        a plain path works too. Default:
                        $XDG_STATE_HOME/fence, else ~/.local/state/fence
  %s
  Credentials in URLs are never printed.

Exit status:
  fence run     CMD's own status (128+N if CMD died of signal N)
  0             status: the key is held; list: success
  1             fence itself failed (store unusable, I/O error)
  2             usage error (missing --key or command, bad duration or URL)
  3             status: the key is free
  75            run: the key is held (--no-wait, or --wait ran out)
  76            run: the lease was lost; CMD was sent SIGTERM, then SIGKILL
  126, 127      run: CMD could not be executed, or was not found
  128+N         run: fence got signal N while waiting for the key

With --json, "run" writes its own messages as JSON lines on stderr, and
"status" and "list" write JSON on stdout. See docs/cli.md.
`

func main() {
	os.Exit(runMain(os.Args[1:], os.Stdout, os.Stderr))
}

func printUsage(w io.Writer) {
	fmt.Fprintf(w, usage, strings.Join(otherForms(), "\n  "))
}

func otherForms() []string {
	var out []string
	for _, f := range storeurl.Forms() {
		if !strings.HasPrefix(f, "file:") && !strings.HasPrefix(f, "a plain") {
			out = append(out, f)
		}
	}
	return out
}

func runMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return cmdRun(args[1:], stderr)
	case "status":
		return cmdStatus(args[1:], stdout, stderr)
	case "list":
		return cmdList(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		printUsage(stdout)
		return exitOK
	default:
		fmt.Fprintf(stderr, "fence: unknown command %q; run \"fence help\"\n", args[0])
		return exitUsage
	}
}

// usageError is a bad command line: fence prints it and exits 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

// newFlags returns a flag set for a subcommand, with --store and --json.
func newFlags(name, synopsis string, stderr io.Writer) (*flag.FlagSet, *string, *bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s\n", synopsis)
		fs.PrintDefaults()
	}
	store := fs.String("store", "", "store URL (default $FENCE_STORE, else the per-user directory)")
	jsonOut := fs.Bool("json", false, "machine-readable output")
	return fs, store, jsonOut
}

// openStore opens the store named by flag, else $FENCE_STORE, else the
// per-user default directory.
func openStore(ctx context.Context, flagValue string) (*fence.Client, func(), string, error) {
	raw := flagValue
	if raw == "" {
		raw = os.Getenv("FENCE_STORE")
	}
	if raw == "" {
		dir, err := storeurl.DefaultDir()
		if err != nil {
			return nil, nil, "", err
		}
		raw = dir
	}
	drv, closer, err := storeurl.Open(ctx, raw)
	if err != nil {
		if errors.Is(err, storeurl.ErrBadURL) {
			return nil, nil, "", &usageError{err.Error()}
		}
		return nil, nil, "", err
	}
	return fence.New(drv), func() { closer.Close() }, storeurl.Redact(raw), nil
}

// exitFor prints err and returns its exit status: 2 for usage errors
// (and invalid keys or TTLs), 1 otherwise.
func exitFor(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "fence: %v\n", strings.TrimPrefix(err.Error(), "fence: "))
	var ue *usageError
	if errors.As(err, &ue) || errors.Is(err, fence.ErrInvalidKey) || errors.Is(err, fence.ErrInvalidTTL) ||
		errors.Is(err, fence.ErrInvalidOption) {
		return exitUsage
	}
	return exitError
}
