package fencesqlite

import "time"

// WithClock makes the Store read the wall clock from now: tests step it to
// show what a clock jump does.
func WithClock(now func() time.Time) Option { return func(o *options) { o.now = now } }
