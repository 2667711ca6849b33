//go:build !linux

package fencesqlite_test

import (
	"fmt"
	"os"
)

// The child processes of process_test.go run on Linux only.
const (
	childDBEnv   = "FENCESQLITE_TEST_DB"
	childRoleEnv = "FENCESQLITE_TEST_ROLE"
)

func childMain(string, string) int {
	fmt.Fprintln(os.Stderr, "no child processes outside Linux")
	return 1
}
