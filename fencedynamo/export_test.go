package fencedynamo

// SetTestHook sets the function called after an acquisition reads the
// item, before it writes, until restore is called. Tests that set it must
// not run in parallel.
func SetTestHook(afterRead func(key string)) (restore func()) {
	testHookRead = afterRead
	return func() { testHookRead = nil }
}
