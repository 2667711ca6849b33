package fencesqlite

import "time"

// WithClock makes the Store read the wall clock from now: tests step it to
// show what a clock jump does.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }

// FSName is fsName, for the test of the network file system check.
var FSName = fsName
