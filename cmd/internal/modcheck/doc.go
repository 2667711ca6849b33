// Package modcheck holds the test that keeps the module split honest: a
// program that imports the core and one store module gets that store's
// SDK and nothing of the other stores', and a program that imports only
// the core gets nothing beyond the standard library and golang.org/x.
//
// For each case the test writes a scratch module outside the repository
// that requires the core and the store module at this checkout (replace
// directives, as a user's build would see them at one release), lists its
// module graph with `go list -m all` outside the workspace, and builds it.
// The go.sum entries come from the repository's own go.sum files, so the
// test asks no checksum database; modules missing from the local module
// cache come from GOPROXY.
package modcheck
