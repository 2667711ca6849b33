//go:build !linux

package fencesqlite

// networkFS reports nothing outside Linux: there the check is not made
// (docs/sqlite.md).
func networkFS(string) string { return "" }
