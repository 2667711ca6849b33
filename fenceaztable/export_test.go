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

// SetDelayMutant makes every Store keep the lock-delay the broken way
// mutant names, until restore is called:
//
//   - "ignore-delay": contenders take a key once its lease is over, as if
//     the entity carried no delay;
//   - "release-after-end": a holder renews and releases after its lease
//     ended, lifting the delay;
//   - "resume-in-delay": Resume takes back a lease whose TTL has run out
//     while its delay runs.
//
// Tests that set it must not run in parallel.
func SetDelayMutant(mutant string) (restore func()) {
	switch mutant {
	case "ignore-delay", "release-after-end", "resume-in-delay":
		testHookDelay = mutant
	default:
		panic("no mutant " + mutant)
	}
	return func() { testHookDelay = "" }
}
