package bench

// Analysis is the part of docs/performance.md that explains the figures:
// why fence costs what it costs on each store, and where a peer's design
// wins. It is written by hand; the tables and targets above it are
// measured.
const Analysis = `
## What the figures say

(to be written)
`
