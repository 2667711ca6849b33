package modcheck

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// sdks names, per store module, the packages of the SDK that store is
// built on. A program importing fence and that store module may get those
// SDKs' module graphs and the core's, and nothing else: no other store's
// SDK, no test tool of ours, nothing a user would have to explain to a
// vulnerability scanner.
var sdks = map[string][]string{
	"fenceazblob": {"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"},
	"fenceetcd":   {"go.etcd.io/etcd/client/v3"},
	"fencegocron": {"github.com/go-co-op/gocron/v2"},
	// client-go's root package is only its doc: the graph of the one
	// fencek8s imports is what it brings.
	"fencek8s":    {"k8s.io/client-go", "k8s.io/client-go/kubernetes"},
	"fencemysql":  {"github.com/go-sql-driver/mysql"},
	"fencenats":   {"github.com/nats-io/nats.go"},
	"fenceotel":   {"go.opentelemetry.io/otel"},
	"fencepg":     {"github.com/jackc/pgx/v5"},
	"fenceredis":  {"github.com/redis/go-redis/v9"},
	"fencesql":    nil, // database/sql: the program brings its driver
	"fencesqlite": {"modernc.org/sqlite"},
	"fencezk":     {"github.com/go-zookeeper/zk"},

	// fenceaztable uses azcore itself (ETags, pipeline options) beside
	// the table SDK, at the version fenceazblob's SDK needs.
	"fenceaztable": {"github.com/Azure/azure-sdk-for-go/sdk/data/aztables", "github.com/Azure/azure-sdk-for-go/sdk/azcore"},

	// fencedynamo uses the SDK's core (retries, raw responses) and
	// smithy-go (errors) beside the DynamoDB client, which requires both.
	"fencedynamo": {"github.com/aws/aws-sdk-go-v2/service/dynamodb"},
}

// limits bounds the graph of fence + one store where the issue that split
// the modules set a number.
var limits = map[string]int{"fenceredis": 30}

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.work")); err != nil {
		t.Fatalf("no go.work at the repository root %s: %v", dir, err)
	}
	return dir
}

// workspace returns the directories of go.work's use lines.
func workspace(t *testing.T, root string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "go.work"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var dirs []string
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "use (":
			in = true
		case in && l == ")":
			in = false
		case in && l != "" && !strings.HasPrefix(l, "//"):
			dirs = append(dirs, filepath.Clean(l))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return dirs
}

// stores returns the store modules: top-level fence* modules.
func stores(t *testing.T, root string) []string {
	var s []string
	for _, d := range workspace(t, root) {
		if strings.HasPrefix(d, "fence") && !strings.Contains(d, string(filepath.Separator)) {
			s = append(s, d)
		}
	}
	if len(s) == 0 {
		t.Fatal("go.work lists no store modules")
	}
	return s
}

// graph builds a scratch program importing the given packages of the
// repository, with the given modules (directories) replaced by the
// checkout, and returns its `go list -m all`.
func graph(t *testing.T, root string, mods []string, pkgs []string) []string {
	t.Helper()
	dir := t.TempDir()
	var mod, sum strings.Builder
	mod.WriteString("module example.com/scratch\n\ngo 1.26.0\n\n")
	modPath := func(m string) string {
		if m == "." {
			return "github.com/fencing/fence"
		}
		return "github.com/fencing/fence/" + filepath.ToSlash(m)
	}
	for _, m := range mods {
		mod.WriteString("require " + modPath(m) + " v0.0.0\n")
	}
	// Every module of the checkout is replaced by its directory, required
	// or not: a store module may require a module of ours that the
	// program does not name (the Azure stores' azkit), and a dependency's
	// own replace directives do not apply to the program.
	for _, m := range workspace(t, root) {
		mod.WriteString("replace " + modPath(m) + " => " + filepath.Join(root, m) + "\n")
	}
	for _, m := range mods {
		b, err := os.ReadFile(filepath.Join(root, m, "go.sum"))
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		sum.Write(b)
	}
	var src strings.Builder
	src.WriteString("package main\n\nimport (\n")
	for _, p := range pkgs {
		src.WriteString("\t_ \"" + p + "\"\n")
	}
	src.WriteString(")\n\nfunc main() {}\n")
	for name, text := range map[string]string{"go.mod": mod.String(), "go.sum": sum.String(), "main.go": src.String()} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod", "GOSUMDB=off")
	run := func(args ...string) string {
		cmd := exec.Command("go", args...)
		cmd.Dir = dir
		cmd.Env = env
		out, err := cmd.Output()
		if err != nil {
			msg := err.Error()
			if ee, ok := err.(*exec.ExitError); ok {
				msg = string(ee.Stderr)
			}
			t.Fatalf("go %s in a program importing %v: %s", strings.Join(args, " "), pkgs, msg)
		}
		return string(out)
	}
	run("mod", "tidy")
	run("build", "-o", os.DevNull, ".")
	var list []string
	for _, l := range strings.Split(strings.TrimSpace(run("list", "-m", "all")), "\n") {
		list = append(list, strings.Fields(l)[0])
	}
	return list
}

func matching(list []string, prefixes []string) []string {
	var hit []string
	for _, m := range list {
		for _, p := range prefixes {
			if strings.HasPrefix(m, p) {
				hit = append(hit, m)
			}
		}
	}
	return hit
}

// TestStoreModules: fence + one store gets that store's SDK, none of the
// others', and stays within the limits.
func TestStoreModules(t *testing.T) {
	r := root(t)
	core := graph(t, r, []string{"."}, []string{"github.com/fencing/fence"})
	for _, s := range stores(t, r) {
		t.Run(s, func(t *testing.T) {
			for _, p := range problems(t, r, core, s, nil) {
				t.Error(p)
			}
		})
	}
}

// TestProblemsFound: the check is able to fail. A store module whose
// program also pulls in PostgreSQL's driver (as a store module would that
// required another store for its tests) is reported.
func TestProblemsFound(t *testing.T) {
	r := root(t)
	core := graph(t, r, []string{"."}, []string{"github.com/fencing/fence"})
	got := strings.Join(problems(t, r, core, "fenceredis", []string{"fencepg"}), "\n")
	for _, want := range []string{
		"gets github.com/jackc/pgx/v5, which neither the core nor",
		"gets another store's SDK github.com/jackc/pgx/v5",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("fenceredis pulling in pgx: problems %q, want one with %q", got, want)
		}
	}
}

// problems lists what is wrong with the graph of a program importing fence
// and store module s (and, to break it on purpose, the extra modules).
func problems(t *testing.T, r string, core []string, s string, extra []string) []string {
	t.Helper()
	own, known := sdks[s]
	if !known {
		return []string{"store module " + s + " is not in modcheck's sdks table: add its SDK"}
	}
	mods := append([]string{".", s}, extra...)
	pkgs := []string{"github.com/fencing/fence"}
	for _, m := range mods[1:] {
		pkgs = append(pkgs, "github.com/fencing/fence/"+m)
	}
	list := graph(t, r, mods, pkgs)
	allowed := map[string]bool{"github.com/fencing/fence/" + s: true}
	for _, m := range core {
		allowed[m] = true
	}
	// What the SDK needs: every module its own requirements reach, in the
	// store module's graph.
	needs := reachable(t, filepath.Join(r, s), own)
	for m := range needs {
		allowed[m] = true
	}
	var probs []string
	for _, m := range list {
		if !allowed[m] && !strings.HasPrefix(m, "github.com/fencing/fence/") {
			probs = append(probs, fmt.Sprintf("fence + %s gets %s, which neither the core nor %v needs", s, m, own))
		}
	}
	var others []string
	for o, p := range sdks {
		if o != s {
			others = append(others, p...)
		}
	}
	for _, m := range matching(list, others) {
		if needs[m] {
			continue // the SDK itself needs it (etcd's client uses OpenTelemetry)
		}
		probs = append(probs, fmt.Sprintf("fence + %s gets another store's SDK %s", s, m))
	}
	if n, ok := limits[s]; ok && len(list) > n {
		probs = append(probs, fmt.Sprintf("fence + %s lists %d modules, more than %d", s, len(list), n))
	}
	t.Logf("fence + %s: %d modules", s, len(list))
	return probs
}

// reachable returns the module paths reachable, in the module graph of
// the module in dir, from the modules whose paths start with one of roots.
func reachable(t *testing.T, dir string, roots []string) map[string]bool {
	t.Helper()
	cmd := exec.Command("go", "mod", "graph")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go mod graph in %s: %v", dir, err)
	}
	edges := map[string][]string{}
	var queue []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		edges[f[0]] = append(edges[f[0]], f[1])
		for _, n := range f {
			if len(matching([]string{n}, roots)) > 0 {
				queue = append(queue, n)
			}
		}
	}
	seen := map[string]bool{}
	paths := map[string]bool{}
	for len(queue) > 0 {
		n := queue[0]
		queue = queue[1:]
		if seen[n] {
			continue
		}
		seen[n] = true
		path, _, _ := strings.Cut(n, "@")
		paths[path] = true
		queue = append(queue, edges[n]...)
	}
	return paths
}
