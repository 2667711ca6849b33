package fencesqlite_test

import (
	"os"
	"testing"

	"github.com/fencing/fence/fencesqlite"
	"github.com/fencing/fence/internal/testkit/leakcheck"
)

func TestMain(m *testing.M) {
	if path := os.Getenv(childDBEnv); path != "" {
		os.Exit(childMain(path, os.Getenv(childRoleEnv)))
	}
	leakcheck.VerifyTestMain(m)
}

// open opens a Store on path, closed when t ends.
func open(t testing.TB, path string, opts ...fencesqlite.Option) *fencesqlite.Store {
	t.Helper()
	s, err := fencesqlite.Open(path, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
