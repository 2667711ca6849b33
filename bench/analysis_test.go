package bench

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
)

// docs/performance.md ends with the analysis exactly as the generator
// writes it from analysis.md: an edit to one without the other fails
// here. The measured part above it is left alone; only a run of the
// command rewrites it.
func TestAnalysisMatchesDocs(t *testing.T) {
	head, _, ok := strings.Cut(Analysis, "\n")
	if !ok || !strings.HasPrefix(head, "## ") {
		t.Fatalf("analysis.md starts with %q, want a section heading", head)
	}
	var md bytes.Buffer
	if err := (&Report{Analysis: Analysis}).WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	generated := md.String()
	i := strings.Index(generated, head+"\n")
	if i < 0 {
		t.Fatalf("the report lacks the analysis heading %q", head)
	}
	docs, err := os.ReadFile("../docs/performance.md")
	if err != nil {
		t.Fatal(err)
	}
	j := strings.Index(string(docs), head+"\n")
	if j < 0 {
		t.Fatalf("docs/performance.md lacks the analysis heading %q; regenerate it with go run ./cmd/fence-bench", head)
	}
	if got, want := string(docs[j:]), generated[i:]; got != want {
		t.Errorf("docs/performance.md's analysis differs from what bench/analysis.md generates "+
			"(copy it over, or regenerate the page with go run ./cmd/fence-bench):\n%s", firstDiff(got, want))
	}
}

// firstDiff shows the first line where got and want differ.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for n := range max(len(g), len(w)) {
		var a, b string
		if n < len(g) {
			a = g[n]
		}
		if n < len(w) {
			b = w[n]
		}
		if a != b {
			return "line " + strconv.Itoa(n+1) + " of the analysis:\n  docs: " + a + "\n  generated: " + b
		}
	}
	return "(they differ only in line endings)"
}
