package bench

import _ "embed"

// Analysis is the part of docs/performance.md that explains the figures:
// why fence costs what it costs on each store, and where a peer's design
// wins. It is written by hand in analysis.md, so it speaks of designs,
// round trips and the rows to look at; the tables and the targets above
// it are measured on every run.
//
//go:embed analysis.md
var Analysis string
