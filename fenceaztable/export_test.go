package fenceaztable

import "time"

// SetTestHook sets the function called after an acquisition reads the
// entity, before it writes, until restore is called. Tests that set it
// must not run in parallel.
func SetTestHook(afterRead func(key string)) (restore func()) {
	testHookRead = afterRead
	return func() { testHookRead = nil }
}

// SetSettleTimeout sets how long the read that settles a write whose
// answer was lost may take, until restore is called. Tests that set it
// must not run in parallel.
func SetSettleTimeout(d time.Duration) (restore func()) {
	old := settleTimeout
	settleTimeout = d
	return func() { settleTimeout = old }
}
