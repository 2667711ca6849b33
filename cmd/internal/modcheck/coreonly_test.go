package modcheck

import (
	"strings"
	"testing"
)

// TestCoreOnly: fence + fencemem is the standard library and golang.org/x.
func TestCoreOnly(t *testing.T) {
	r := root(t)
	list := graph(t, r, []string{"."}, []string{
		"github.com/fencing/fence", "github.com/fencing/fence/fencemem",
		"github.com/fencing/fence/fencefile", "github.com/fencing/fence/fencehttp",
	})
	for _, m := range list {
		if m == "example.com/scratch" || m == "github.com/fencing/fence" || strings.HasPrefix(m, "golang.org/x/") {
			continue
		}
		t.Errorf("a program importing only the core gets module %s", m)
	}
	t.Logf("core: %d modules: %v", len(list), list)
}
