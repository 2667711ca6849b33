package testserver

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// StrictEnv is the environment variable that turns every skip for a missing
// server into a test failure. CI sets it: there, a backend whose tests were
// skipped has not been tested.
const StrictEnv = "FENCE_TEST_STRICT"

// Strict reports whether FENCE_TEST_STRICT=1 (or "true") is set.
func Strict() bool {
	v := strings.ToLower(strings.TrimSpace(os.Getenv(StrictEnv)))
	return v == "1" || v == "true" || v == "yes"
}

// Unavailable ends the test because something it needs is not on this
// machine: t.Skipf normally, t.Fatalf when FENCE_TEST_STRICT=1. The message
// should say what to install. It is for absent software only; a server that
// is present but misbehaves must fail the test, never skip it.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Strict() {
		t.Fatalf("%s (%s=1: a missing server fails the test)", msg, StrictEnv)
		return
	}
	t.Skipf("%s (set %s=1 to make this a failure)", msg, StrictEnv)
}

// Require returns the path of a program a test server needs, or ends the test
// with Unavailable and a message saying what to install. Names it knows where
// to look for beyond PATH: "redis-server", "redis-cli", "postgres", "initdb",
// "psql", "mariadbd", "mariadb-install-db", "mariadb", "etcd", "java",
// "zookeeper" (the ZooKeeper jar; the result is its path), "nats-server",
// "azurite-blob", "dynalite".
func Require(t testing.TB, name string) string {
	t.Helper()
	path, err := lookup(name)
	if err != nil {
		Unavailable(t, "%v", err)
	}
	return path
}

// installHint says how to get each program; scripts/test installs them all.
var installHint = map[string]string{
	"gcc":                "Debian package gcc",
	"ip":                 "Debian package iproute2",
	"redis-server":       "Debian package redis-server",
	"redis-cli":          "Debian package redis-tools",
	"postgres":           "Debian package postgresql",
	"initdb":             "Debian package postgresql",
	"psql":               "Debian package postgresql-client",
	"mariadbd":           "Debian package mariadb-server",
	"mariadb-install-db": "Debian package mariadb-server",
	"mariadb":            "Debian package mariadb-client",
	"etcd":               "Debian package etcd-server",
	"java":               "Debian package default-jre-headless (pulled in by zookeeper)",
	"zookeeper":          "Debian package zookeeper",
	"nats-server":        "GOBIN=$PWD/.tools/bin go install github.com/nats-io/nats-server/v2@" + natsVersion,
	"azurite-blob":       "npm install --prefix .tools azurite@" + azuriteVersion + " (needs Node.js)",
	"dynalite":           "npm install --prefix .tools dynalite@" + dynaliteVersion + " (needs Node.js)",
	"node":               "Debian package nodejs",
	"kube-apiserver":     "it with scripts/kube-apiserver (builds " + KubeVersion + " from source into .tools/kube: minutes)",
}

// Versions scripts/test installs into .tools; keep the two in step.
const (
	natsVersion     = "v2.15.2"
	azuriteVersion  = "3.35.0"
	dynaliteVersion = "4.0.0"
)

type notFoundError struct {
	name   string
	looked []string
}

func (e *notFoundError) Error() string {
	hint := installHint[e.name]
	if hint == "" {
		hint = "it"
	}
	return fmt.Sprintf("testserver: %s not found (looked in %s); install %s, or run scripts/test, which installs every test server",
		e.name, strings.Join(e.looked, ", "), hint)
}

var lookupCache sync.Map // name -> lookupResult

type lookupResult struct {
	path string
	err  error
}

func lookup(name string) (string, error) {
	if r, ok := lookupCache.Load(name); ok {
		r := r.(lookupResult)
		return r.path, r.err
	}
	path, err := lookupUncached(name)
	lookupCache.Store(name, lookupResult{path, err})
	return path, err
}

func lookupUncached(name string) (string, error) {
	var candidates []string
	switch name {
	case "postgres", "initdb", "psql", "pg_ctl":
		// Debian keeps the server programs in a versioned directory off PATH.
		// Take initdb from the same directory as postgres: their versions
		// must match.
		if p, err := exec.LookPath("postgres"); err == nil && name != "postgres" {
			if real, err := filepath.EvalSymlinks(p); err == nil {
				candidates = append(candidates, filepath.Join(filepath.Dir(real), name))
			}
		}
		candidates = append(candidates, "PATH")
		candidates = append(candidates, pgVersionDirs(name)...)
	case "mariadbd", "mariadb-install-db", "mariadb":
		candidates = []string{"PATH", "/usr/sbin/" + name, "/usr/bin/" + name, "/usr/local/sbin/" + name}
	case "nats-server":
		if root := RepoRoot(); root != "" {
			candidates = append(candidates, filepath.Join(root, ".tools", "bin", "nats-server"))
		}
		if p := os.Getenv("FENCE_NATS_SERVER"); p != "" {
			candidates = append(candidates, p)
		}
		candidates = append(candidates, "PATH")
	case "kube-apiserver":
		candidates = kubeCandidates()
	case "azurite-blob":
		if root := RepoRoot(); root != "" {
			candidates = append(candidates, filepath.Join(root, ".tools", "node_modules", ".bin", "azurite-blob"))
		}
		if p := os.Getenv("FENCE_AZURITE"); p != "" {
			candidates = append(candidates, p)
		}
		candidates = append(candidates, "PATH")
	case "dynalite":
		if root := RepoRoot(); root != "" {
			candidates = append(candidates, filepath.Join(root, ".tools", "node_modules", ".bin", "dynalite"))
		}
		if p := os.Getenv("FENCE_DYNALITE"); p != "" {
			candidates = append(candidates, p)
		}
		candidates = append(candidates, "PATH")
	case "zookeeper":
		if p := os.Getenv("FENCE_ZOOKEEPER_JAR"); p != "" {
			candidates = append(candidates, p)
		}
		candidates = append(candidates, "/usr/share/java/zookeeper.jar")
		for _, c := range candidates {
			if fileExists(c) {
				return c, nil
			}
		}
		return "", &notFoundError{name: name, looked: candidates}
	default:
		candidates = []string{"PATH", "/usr/sbin/" + name}
	}
	var looked []string
	for _, c := range candidates {
		if c == "PATH" {
			looked = append(looked, "PATH")
			if p, err := exec.LookPath(name); err == nil {
				return p, nil
			}
			continue
		}
		looked = append(looked, c)
		if isExecutable(c) {
			return c, nil
		}
	}
	return "", &notFoundError{name: name, looked: looked}
}

// pgVersionDirs lists /usr/lib/postgresql/<version>/bin/<name>, newest first.
func pgVersionDirs(name string) []string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	out := make([]string, len(dirs))
	for i, d := range dirs {
		out[i] = filepath.Join(d, name)
	}
	return out
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

func fileExists(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// ModulePath is the module line RepoRoot looks for.
const ModulePath = "github.com/fencing/fence"

var repoRoot = sync.OnceValue(func() string {
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if isRepoRoot(dir) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
})

// RepoRoot returns the root of the fence repository: the nearest directory at
// or above the working directory whose go.mod declares module
// github.com/fencing/fence (so tests of nested modules find it too), or "" if
// there is none. Tools that scripts/test installs live in RepoRoot()/.tools.
func RepoRoot() string { return repoRoot() }

func isRepoRoot(dir string) bool {
	f, err := os.Open(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == ModulePath
		}
	}
	return false
}

var errNotRunning = errors.New("testserver: process is not running")
