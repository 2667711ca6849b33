// Command fence runs commands under fenced leases and shows who holds
// which key. See docs/cli.md, or run "fence help".
//
//	fence run [--store URL] --key K [--ttl 60s] [--wait D | --no-wait | --resume]
//	          [--hold-at-least D] [--grace 10s] [--metrics-addr HOST:PORT]
//	          [--json] -- CMD ARGS...
//	fence status [--store URL] --key K [--json]
//	fence list [--store URL] [--prefix P] [--watch [--interval 1s]] [--json]
//	fence break [--store URL] --key K (--token N | --force) [--json]
//	fence help | --help | -h
//	fence --version
//
// The default store is a per-user directory of lock files
// ($XDG_STATE_HOME/fence, else ~/.local/state/fence); --store or the
// FENCE_STORE environment variable names another.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/cmd/internal/storeurl"
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
  fence run [--store URL] --key K [--ttl 60s] [--wait D | --no-wait | --resume]
            [--hold-at-least D] [--grace 10s] [--metrics-addr HOST:PORT]
            [--json] -- CMD ARGS...
      Run CMD while holding K. CMD gets FENCE_KEY, FENCE_TOKEN and
      FENCE_OWNER in its environment; send FENCE_TOKEN with every write
      to the protected resource. While K is held by another, fence waits
      and shows who holds it (live, on a terminal). --metrics-addr serves
      Prometheus metrics at http://HOST:PORT/metrics while fence runs.
      --resume takes back the still-valid lease that FENCE_OWNER and
      FENCE_TOKEN name, keeping its token (stores that support it).
  fence status [--store URL] --key K [--json]
      Show who holds K: owner, host, pid, token, time held, time left.
  fence list [--store URL] [--prefix P] [--watch [--interval 1s]] [--json]
      Show every held key (starting with P); with --watch, keep showing
      them, refreshed every --interval, until interrupted.
  fence break [--store URL] --key K (--token N | --force) [--json]
      Force-release K: delete its lease only if its token is N (--force:
      whatever lease holds it). The next holder gets a greater token.
  fence help (or --help, -h)
      Show this help. "fence CMD -h" shows CMD's flags.
  fence --version
      Show fence's version.

Store (--store, else $FENCE_STORE, else the per-user default):
  file:///path/to/dir   lock files in a directory, same host only; a path
                        starting with /, ./, ../ or ~/ works too. Default:
                        $XDG_STATE_HOME/fence, else ~/.local/state/fence
  %s
  Anything else is an error, never another store. Credentials in URLs
  (passwords, tokens, keys, signatures) are never printed.

Exit status:
  fence run     CMD's own status (128+N if CMD died of signal N)
  0             status: the key is held; list: success; break: broken
  1             fence itself failed (store unusable, I/O error)
  2             usage error (missing --key or command, bad duration or URL)
  3             status, break: the key is free
  75            run: the key is held (--no-wait, or --wait ran out);
                break: held with another token than --token
  76            run: the lease was lost, while CMD ran (CMD was sent SIGTERM,
                then SIGKILL) or found when releasing it; run --resume:
                the lease is no longer held
  126, 127      run: CMD could not be executed, or was not found
  128+N         run: fence got signal N while waiting for the key

With --json, "run" writes its own messages as JSON lines on stderr;
"status" and "list" write JSON on stdout ("list --watch": one object per
line, per refresh); every error, of the command line too, is a JSON
object on stderr. See
docs/cli.md; for metrics, alerts and reading the output, docs/operating.md.
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
		return cmdRun(args[1:], stdout, stderr)
	case "status":
		return cmdStatus(args[1:], stdout, stderr)
	case "list":
		return cmdList(args[1:], stdout, stderr)
	case "break":
		return cmdBreak(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		printUsage(stdout)
		return exitOK
	case "version", "-version", "--version":
		fmt.Fprintf(stdout, "fence %s\n", version(debug.ReadBuildInfo()))
		return exitOK
	default:
		fmt.Fprintf(stderr, "fence: unknown command %q; run \"fence help\"\n", args[0])
		return exitUsage
	}
}

// version returns the fence module's version as the build recorded it
// ("v1.2.3" for go install ...@v1.2.3), "(devel)" otherwise.
func version(info *debug.BuildInfo, ok bool) string {
	if !ok || info.Main.Version == "" {
		return "(devel)"
	}
	return info.Main.Version
}

// usageError is a bad command line: fence prints it and exits 2.
type usageError struct {
	msg  string
	err  error  // what it wraps, if anything
	hint string // what to do about it, if fence can tell
}

func (e *usageError) Error() string { return e.msg }
func (e *usageError) Unwrap() error { return e.err }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// newFlags returns a flag set for a subcommand, with --store and --json.
// Parse it with parseFlags.
func newFlags(name string) (*flag.FlagSet, *string, *bool) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	// parseFlags prints: the flag package would print the whole usage
	// after every mistake.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	store := fs.String("store", "", "store `URL` (default $FENCE_STORE, else the per-user directory)")
	jsonOut := fs.Bool("json", false, "machine-readable output (see docs/cli.md)")
	return fs, store, jsonOut
}

// parseFlags parses args into fs. With -h it prints the usage (synopsis
// and flags) on stdout and returns flag.ErrHelp; after a mistake it
// returns a usage error saying briefly what was wrong.
func parseFlags(fs *flag.FlagSet, synopsis string, args []string, stdout io.Writer) error {
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprintf(stdout, "usage: %s\n", synopsis)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
		return err
	}
	msg := err.Error()
	if rest, found := strings.CutPrefix(msg, "flag provided but not defined: "); found {
		msg = "unknown flag " + rest + " (flag provided but not defined)"
	}
	return &usageError{msg: fs.Name() + ": " + msg, err: err,
		hint: fmt.Sprintf("usage: %s\n\"fence %s -h\" lists the flags", synopsis, fs.Name())}
}

// wantsJSON reports whether args, which fs failed to parse or has not
// parsed yet, ask for --json: errors of the command line are then JSON
// too. It reads the flags as fs would, up to "--" or the first argument,
// going past flags fs does not know.
func wantsJSON(fs *flag.FlagSet, args []string) bool {
	on := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || a == "-" || !strings.HasPrefix(a, "-") {
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			if name == "json" {
				v, err := strconv.ParseBool(value)
				on = !hasValue || err == nil && v
			}
			continue
		}
		if !hasValue {
			i++ // the flag's value
		}
	}
	return on
}

// durationFlag defines a duration flag whose errors say what a duration
// looks like.
func durationFlag(fs *flag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	fs.Var((*durationValue)(p), name, usage)
}

type durationValue time.Duration

func (d *durationValue) String() string {
	if d == nil {
		return ""
	}
	return time.Duration(*d).String()
}

func (d *durationValue) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err == nil {
		*d = durationValue(v)
		return nil
	}
	if _, nerr := strconv.ParseFloat(s, 64); nerr == nil {
		return fmt.Errorf("a duration needs a unit: %ss, %sms, %sm? (durations look like 300ms, 10s, 1m30s, 2h)", s, s, s)
	}
	return errors.New("not a duration (durations look like 300ms, 10s, 1m30s, 2h)")
}

// exitFor prints err, with a hint of what to do where fence has one, and
// returns its exit status.
func exitFor(stderr io.Writer, err error) int {
	fmt.Fprintf(stderr, "fence: %s\n", errorText(err))
	if h := hint(err); h != "" {
		fmt.Fprintf(stderr, "  %s\n", strings.ReplaceAll(h, "\n", "\n  "))
	}
	return errorStatus(err)
}

// errorStatus is the exit status for an error that ends a command: 2 for
// usage errors (and invalid keys or TTLs), 1 otherwise.
func errorStatus(err error) int {
	var ue *usageError
	if errors.As(err, &ue) || errors.Is(err, fence.ErrInvalidKey) || errors.Is(err, fence.ErrInvalidTTL) ||
		errors.Is(err, fence.ErrInvalidOption) {
		return exitUsage
	}
	return exitError
}
