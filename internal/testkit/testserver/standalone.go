package testserver

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
)

// ErrUnavailable matches the error Env.Do returns when a server's program
// is not installed (where a test would be skipped).
var ErrUnavailable = errors.New("testserver: program not available")

// Env lets a program that is not a test, such as the torture tool, start
// and fault the servers of this package: pass it where a start function
// takes a testing.TB, inside Do. A Fatalf (a server that did not start, a
// failed Restart) or a skip for a missing program ends Do with an error
// instead of a test; Close runs the cleanups a test would run at its end,
// killing the servers and removing their data.
//
// Call the functions that can fail (the start functions, Restart) inside
// Do, on Do's own goroutine: Fatalf unwinds to it with a panic. Kill, Stop
// and Cont may be called anywhere; their errors are collected (Err).
//
// Env implements only the testing.TB methods this package calls; the
// others panic.
type Env struct {
	testing.TB // nil; makes Env a testing.TB

	name string
	log  io.Writer

	mu       sync.Mutex
	cleanups []func()
	errs     []error
	failed   bool
}

// NewEnv returns an Env whose log lines (server start retries, log tails
// of failed servers) go to log, which may be nil.
func NewEnv(name string, log io.Writer) *Env {
	if log == nil {
		log = io.Discard
	}
	return &Env{name: name, log: log}
}

// stopDo unwinds a Do call after Fatalf or Skipf.
type stopDo struct{ err error }

// Do runs f with the Env as its testing.TB and returns the error of a
// Fatalf or skip in f, or of the Errorf calls f made, joined.
func (e *Env) Do(f func(tb testing.TB)) (err error) {
	e.mu.Lock()
	before := len(e.errs)
	e.mu.Unlock()
	defer func() {
		if r := recover(); r != nil {
			s, ok := r.(stopDo)
			if !ok {
				panic(r)
			}
			err = s.err
			return
		}
		e.mu.Lock()
		defer e.mu.Unlock()
		err = errors.Join(e.errs[before:]...)
	}()
	f(e)
	return nil
}

// Err returns every error reported through the Env so far (Errorf from
// Kill, Stop or Cont called outside Do included), joined.
func (e *Env) Err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return errors.Join(e.errs...)
}

// Close runs the cleanups registered so far, last first: it kills the
// servers and removes their data. The Env can be used again afterwards.
func (e *Env) Close() {
	for {
		e.mu.Lock()
		n := len(e.cleanups)
		if n == 0 {
			e.mu.Unlock()
			return
		}
		f := e.cleanups[n-1]
		e.cleanups = e.cleanups[:n-1]
		e.mu.Unlock()
		f()
	}
}

func (e *Env) record(err error) {
	e.mu.Lock()
	e.errs = append(e.errs, err)
	e.failed = true
	e.mu.Unlock()
	fmt.Fprintln(e.log, err)
}

// Helper implements testing.TB.
func (e *Env) Helper() {}

// Name implements testing.TB.
func (e *Env) Name() string { return e.name }

// Cleanup implements testing.TB.
func (e *Env) Cleanup(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.cleanups = append(e.cleanups, f)
}

// TempDir implements testing.TB: a new directory, removed by Close.
func (e *Env) TempDir() string {
	dir, err := os.MkdirTemp("", "fence-"+e.name+"-")
	if err != nil {
		e.Fatalf("testserver: %v", err)
	}
	e.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// Log implements testing.TB.
func (e *Env) Log(args ...any) { fmt.Fprintln(e.log, args...) }

// Logf implements testing.TB.
func (e *Env) Logf(format string, args ...any) { fmt.Fprintf(e.log, format+"\n", args...) }

// Error implements testing.TB.
func (e *Env) Error(args ...any) { e.record(errors.New(fmt.Sprint(args...))) }

// Errorf implements testing.TB.
func (e *Env) Errorf(format string, args ...any) { e.record(fmt.Errorf(format, args...)) }

// Fail implements testing.TB.
func (e *Env) Fail() {
	e.mu.Lock()
	e.failed = true
	e.mu.Unlock()
}

// Failed implements testing.TB.
func (e *Env) Failed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.failed
}

// FailNow implements testing.TB: it ends the current Do.
func (e *Env) FailNow() { e.Fatal("testserver: FailNow") }

// Fatal implements testing.TB: it ends the current Do with an error.
func (e *Env) Fatal(args ...any) { e.stop(errors.New(fmt.Sprint(args...))) }

// Fatalf implements testing.TB: it ends the current Do with an error.
func (e *Env) Fatalf(format string, args ...any) { e.stop(fmt.Errorf(format, args...)) }

// Skip implements testing.TB: it ends the current Do with an error
// matching ErrUnavailable.
func (e *Env) Skip(args ...any) { e.skip(fmt.Sprint(args...)) }

// Skipf implements testing.TB: it ends the current Do with an error
// matching ErrUnavailable.
func (e *Env) Skipf(format string, args ...any) { e.skip(fmt.Sprintf(format, args...)) }

// SkipNow implements testing.TB.
func (e *Env) SkipNow() { e.skip("skipped") }

// Skipped implements testing.TB.
func (e *Env) Skipped() bool { return false }

func (e *Env) skip(msg string) {
	panic(stopDo{fmt.Errorf("%w: %s", ErrUnavailable, msg)})
}

func (e *Env) stop(err error) {
	e.record(err)
	panic(stopDo{err})
}
