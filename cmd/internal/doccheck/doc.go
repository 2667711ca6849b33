// Package doccheck holds the test that compiles every Go snippet of the
// README and of docs/*.md, so that the documentation cannot drift from
// the API. It has no code of its own; see snippets_test.go.
//
// A snippet is a fenced block opened with ```go. It is one of:
//   - a whole file, starting with a package clause;
//   - declarations (func, type, var, const), with an optional import
//     block first;
//   - statements, with an optional import block first: they are compiled
//     as the body of a function returning error.
//
// Imports a snippet leaves out are added for the packages it names
// (fence, fenceredis, redis, context, time, ...), and the names a
// fragment uses without declaring (ctx, rdb, db, pool, lease, ...) are
// declared once for all snippets, in the test's prelude. A variable a
// fragment declares and does not use is not an error; everything else
// the compiler reports is, with the Markdown file and line of the
// snippet.
package doccheck

// The snippets are built in this package's module (cmd), which must
// therefore require every module they import, even one no command uses.
import (
	_ "github.com/fencing/fence/fencegocron"
	_ "github.com/fencing/fence/fencesql"
)
