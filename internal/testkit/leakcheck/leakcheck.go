// Package leakcheck finds goroutines a test left running. It is the
// project's own small replacement for a third-party leak checker, so that
// the core module's tests need nothing outside the standard library.
//
// A test binary checks itself once all its tests have run:
//
//	func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }
//
// and a single test checks what it started:
//
//	before := leakcheck.IgnoreCurrent()
//	... start and stop things ...
//	if err := leakcheck.Find(before); err != nil { t.Error(err) }
//
// Goroutines take time to finish after what ended them (a closed
// connection, a cancelled context), so Find looks again, with growing
// pauses, for up to Settle before it reports what is left.
package leakcheck

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Settle is how long Find waits for goroutines to finish before it calls
// them leaked.
var Settle = 5 * time.Second

// Option tells Find to ignore some goroutines.
type Option func(*goroutine) bool

// IgnoreAnyFunction ignores goroutines with fn anywhere on their stack
// (fn as the runtime prints it: "pkg/path.Type.Method" or "pkg/path.func").
func IgnoreAnyFunction(fn string) Option {
	return func(g *goroutine) bool {
		for _, f := range g.funcs {
			if f == fn {
				return true
			}
		}
		return false
	}
}

// IgnoreCurrent ignores the goroutines running now.
func IgnoreCurrent() Option {
	ids := map[int]bool{}
	for _, g := range goroutines() {
		ids[g.id] = true
	}
	return func(g *goroutine) bool { return ids[g.id] }
}

// Find returns an error describing every goroutine that is still running
// after Settle, other than the caller, the testing package's and the
// runtime's own, and those opts ignore; nil if there are none.
func Find(opts ...Option) error {
	deadline := time.Now().Add(Settle)
	pause := time.Millisecond
	for {
		left := leaked(opts)
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			fmt.Fprintf(&b, "%d goroutine(s) left running:", len(left))
			for _, g := range left {
				b.WriteString("\n\n")
				b.WriteString(g.stack)
			}
			return fmt.Errorf("%s", b.String())
		}
		time.Sleep(pause)
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// VerifyTestMain runs the tests and, if they passed, fails the binary when
// goroutines were left running.
func VerifyTestMain(m *testing.M, opts ...Option) {
	code := m.Run()
	if code == 0 {
		if err := Find(opts...); err != nil {
			fmt.Fprintln(os.Stderr, "leakcheck:", err)
			code = 1
		}
	}
	os.Exit(code)
}

type goroutine struct {
	id    int
	state string
	funcs []string // innermost first
	stack string
}

func leaked(opts []Option) []*goroutine {
	all := goroutines()
	var left []*goroutine
	for i, g := range all {
		if i == 0 || system(g) {
			continue // the first is the caller's own
		}
		ignored := false
		for _, o := range opts {
			if o(g) {
				ignored = true
				break
			}
		}
		if !ignored {
			left = append(left, g)
		}
	}
	return left
}

// system reports goroutines owned by the runtime and the testing package.
func system(g *goroutine) bool {
	if len(g.funcs) == 0 {
		return true
	}
	for _, f := range g.funcs {
		switch {
		case strings.HasPrefix(f, "testing."),
			strings.HasPrefix(f, "os/signal."),
			strings.HasPrefix(f, "runtime/trace."),
			f == "runtime.ensureSigM",
			f == "runtime.ReadTrace":
			return true
		}
	}
	return false
}

// goroutines parses runtime.Stack(all): blocks separated by a blank line,
// each a header "goroutine N [state]:" and then pairs of lines, a function
// call and its file:line, ending with "created by ...".
func goroutines() []*goroutine {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var gs []*goroutine
	for _, block := range strings.Split(string(buf), "\n\n") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		header, ok := strings.CutPrefix(lines[0], "goroutine ")
		if !ok {
			continue
		}
		idText, state, _ := strings.Cut(header, " ")
		id, err := strconv.Atoi(idText)
		if err != nil {
			continue
		}
		g := &goroutine{id: id, state: strings.Trim(state, "[]:"), stack: block}
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "created by ") {
				continue
			}
			fn := l
			if i := strings.LastIndex(fn, "("); i > 0 {
				fn = fn[:i]
			}
			g.funcs = append(g.funcs, fn)
		}
		gs = append(gs, g)
	}
	return gs
}
