package doccheck

import (
	"bufio"
	"encoding/json"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// snippet is one ```go block of a Markdown file.
type snippet struct {
	file string // relative to the repository root
	line int    // line of the block's first line of code
	code string
}

func (s snippet) String() string { return fmt.Sprintf("%s:%d", s.file, s.line) }

// extract returns the ```go blocks of the Markdown text, as found in file.
func extract(file, text string) ([]snippet, error) {
	var (
		out  []snippet
		cur  *snippet
		code strings.Builder
	)
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		fence := strings.TrimSpace(line)
		switch {
		case cur == nil && strings.HasPrefix(fence, "```go") && strings.TrimSpace(fence[len("```go"):]) == "":
			cur = &snippet{file: file, line: n + 1}
			code.Reset()
		case cur != nil && strings.HasPrefix(fence, "```"):
			cur.code = code.String()
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			code.WriteString(line)
			code.WriteByte('\n')
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("%s:%d: ```go block never closed", file, cur.line-1)
	}
	return out, sc.Err()
}

// knownImports are the packages a snippet may name without importing them.
var knownImports = map[string]string{
	"fence":       "github.com/fencing/fence",
	"fenceazblob": "github.com/fencing/fence/fenceazblob",
	"fenceetcd":   "github.com/fencing/fence/fenceetcd",
	"fencefile":   "github.com/fencing/fence/fencefile",
	"fencek8s":    "github.com/fencing/fence/fencek8s",
	"fencehttp":   "github.com/fencing/fence/fencehttp",
	"fencemem":    "github.com/fencing/fence/fencemem",
	"fencemysql":  "github.com/fencing/fence/fencemysql",
	"fenceotel":   "github.com/fencing/fence/fenceotel",
	"fencenats":   "github.com/fencing/fence/fencenats",
	"fencepg":     "github.com/fencing/fence/fencepg",
	"fenceredis":  "github.com/fencing/fence/fenceredis",
	"fencesql":    "github.com/fencing/fence/fencesql",
	"fencetest":   "github.com/fencing/fence/fencetest",
	"fencezk":     "github.com/fencing/fence/fencezk",

	"context": "context",
	"errors":  "errors",
	"fmt":     "fmt",
	"http":    "net/http",
	"io":      "io",
	"log":     "log",
	"os":      "os",
	"slog":    "log/slog",
	"sql":     "database/sql",
	"testing": "testing",
	"time":    "time",

	"clientv3":  "go.etcd.io/etcd/client/v3",
	"container": "github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container",
	"nats":      "github.com/nats-io/nats.go",
	"pgx":       "github.com/jackc/pgx/v5",
	"pgxpool":   "github.com/jackc/pgx/v5/pgxpool",
	"redis":     "github.com/redis/go-redis/v9",
	"rest":      "k8s.io/client-go/rest",
	"zk":        "github.com/go-zookeeper/zk",

	// docs/aztable.md
	"fenceaztable": "github.com/fencing/fence/fenceaztable",
	"aztables":     "github.com/Azure/azure-sdk-for-go/sdk/data/aztables",

	// docs/dynamodb.md
	"fencedynamo": "github.com/fencing/fence/fencedynamo",
	"dynamodb":    "github.com/aws/aws-sdk-go-v2/service/dynamodb",
	"config":      "github.com/aws/aws-sdk-go-v2/config",
}

// prelude declares, once for every snippet, the names fragments use
// without declaring them. A fragment that declares one of them itself
// shadows it.
const prelude = `package snippets

import (
	"context"
	"database/sql"
	"io"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/fencing/fence"
)

var (
	ctx           context.Context
	redisClient   *redis.Client
	rdb           *redis.Client
	a, b, c       redis.UniversalClient
	db            *sql.DB
	pool          *pgxpool.Pool
	lease         *fence.Lease
	handler       http.Handler
	endpoint      string
	body          io.Reader
	connStr       string
	meterProvider metric.MeterProvider
	tracerProvider trace.TracerProvider
)

func writeInvoices(context.Context, int64) error { return nil }
`

var (
	importBlock = regexp.MustCompile(`(?s)^\s*import\s*(\([^)]*\)|"[^"]*")\s*`)
	selector    = regexp.MustCompile(`\b([a-z][a-z0-9]*)\.[A-Z]`)
	comment     = regexp.MustCompile("//[^\n]*|\"(\\\\.|[^\"\\\\\n])*\"|`[^`]*`")
	unusedVar   = regexp.MustCompile(`: declared and not used: `)
)

// source returns the Go file that compiles s in package snippets: s
// itself if it is a whole file, else s with the imports it needs, its
// statements wrapped in a function. Line directives point the compiler's
// messages at the Markdown.
func source(s snippet, name string) (string, error) {
	if strings.HasPrefix(strings.TrimSpace(s.code), "package ") {
		return fmt.Sprintf("//line %s:%d\n%s", s.file, s.line, s.code), nil
	}
	code := s.code
	var imports []string
	if m := importBlock.FindStringSubmatchIndex(code); m != nil {
		for _, l := range strings.Split(strings.Trim(code[m[2]:m[3]], "()"), "\n") {
			if l = strings.TrimSpace(l); l != "" {
				imports = append(imports, l)
			}
		}
		code = code[m[1]:]
	}
	startLine := s.line + strings.Count(s.code[:len(s.code)-len(code)], "\n")
	// The packages the code names and does not import itself.
	bare := comment.ReplaceAllString(code, "")
	for _, m := range selector.FindAllStringSubmatch(bare, -1) {
		path, ok := knownImports[m[1]]
		if !ok {
			continue
		}
		imp := fmt.Sprintf("%q", path)
		if !slices.ContainsFunc(imports, func(i string) bool { return strings.HasSuffix(i, imp) }) {
			imports = append(imports, imp)
		}
	}
	var b strings.Builder
	b.WriteString("package snippets\n\n")
	if len(imports) > 0 {
		b.WriteString("import (\n\t" + strings.Join(imports, "\n\t") + "\n)\n\n")
	}
	decls := "package snippets\n" + code
	if _, err := parser.ParseFile(token.NewFileSet(), "", decls, 0); err == nil && strings.TrimSpace(code) != "" {
		fmt.Fprintf(&b, "//line %s:%d\n%s", s.file, startLine, code)
		return b.String(), nil
	}
	fmt.Fprintf(&b, "func %s() error {\n//line %s:%d\n%s\nreturn nil\n}\n", name, s.file, startLine, code)
	return b.String(), nil
}

// compile builds the snippets as one package and returns the compiler's
// complaints, declared-and-unused variables left out.
func compile(t *testing.T, root string, snips []snippet) []string {
	t.Helper()
	dir := filepath.Join(root, "cmd", "internal", "doccheck", "snippets_gen")
	tmp := t.TempDir()
	overlay := map[string]string{}
	add := func(name, src string) {
		p := filepath.Join(tmp, name)
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		overlay[filepath.Join(dir, name)] = p
	}
	add("prelude.go", prelude)
	for i, s := range snips {
		src, err := source(s, fmt.Sprintf("snippet%d", i))
		if err != nil {
			t.Fatalf("%v: %v", s, err)
		}
		add(fmt.Sprintf("snippet%d.go", i), src)
	}
	js, err := json.Marshal(map[string]any{"Replace": overlay})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(tmp, "overlay.json")
	if err := os.WriteFile(ov, js, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(goTool(), "build", "-gcflags=-e", "-overlay", ov, "./internal/doccheck/snippets_gen")
	cmd.Dir = filepath.Join(root, "cmd") // the module that requires every store
	out, err := cmd.CombinedOutput()
	if err == nil {
		return nil
	}
	var problems []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(l, "#") || strings.HasPrefix(l, "go: ") || unusedVar.MatchString(l) {
			continue
		}
		problems = append(problems, l)
	}
	if len(problems) == 0 && !strings.Contains(string(out), "declared and not used") {
		problems = append(problems, "go build failed: "+string(out))
	}
	return problems
}

func goTool() string {
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	return "go"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// docs returns the Markdown files whose snippets must compile.
func docs(t *testing.T, root string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(root, "README.md")}, files...)
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestSnippetsCompile compiles every Go snippet of the README and docs.
func TestSnippetsCompile(t *testing.T) {
	root := repoRoot(t)
	var all []snippet
	for _, f := range docs(t, root) {
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		snips, err := extract(rel, string(text))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, snips...)
	}
	if len(all) < 10 {
		t.Fatalf("found %d Go snippets in README.md and docs/; the extraction is broken", len(all))
	}
	for _, p := range compile(t, root, all) {
		t.Error(p)
	}
	t.Logf("%d snippets compiled", len(all))
}

// TestBrokenSnippetsFail checks that the test can fail: snippets with a
// real mistake each make the compilation report it at their own line.
func TestBrokenSnippetsFail(t *testing.T) {
	root := repoRoot(t)
	broken := map[string]string{
		// The README's example as it once was: err declared twice.
		"redeclared":  "store, err := fenceredis.New(redisClient)\nif err != nil {\n\treturn err\n}\nc := fence.New(store)\nerr := c.Run(ctx, \"k\", nil)\n_ = err\n",
		"no-such-api": "lease, err := fence.New(nil).Grab(ctx, \"k\")\n",
		"placeholder": "if err != nil { ... }\n",
		"wrong-type":  "var d time.Duration = \"10s\"\n_ = d\n",
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range broken {
			if !yield(n) {
				return
			}
		}
	})
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			s := snippet{file: "broken/" + name + ".md", line: 10, code: broken[name]}
			problems := compile(t, root, []snippet{s})
			if len(problems) == 0 {
				t.Fatalf("the broken snippet compiled:\n%s", s.code)
			}
			for _, p := range problems {
				if !strings.HasPrefix(p, "broken/"+name+".md:1") {
					t.Errorf("problem not placed in the snippet's Markdown: %s", p)
				}
			}
		})
	}
	// A fragment's unused variable is not a problem.
	ok := snippet{file: "ok.md", line: 1, code: "lease, err := fence.New(nil).Acquire(ctx, \"k\")\n"}
	if problems := compile(t, root, []snippet{ok}); len(problems) > 0 {
		t.Errorf("a valid fragment with unused variables: %q", problems)
	}
}
