package fenceazblob

// SetTestHooks sets the functions called after an acquisition reads the
// blob and after it takes the lease, until restore is called. Tests that
// set them must not run in parallel.
func SetTestHooks(afterRead, afterLease func(key string)) (restore func()) {
	testHookRead, testHookLeased = afterRead, afterLease
	return func() { testHookRead, testHookLeased = nil, nil }
}
