package fencek8s

// SetDelayMutant makes every Store keep the lock-delay the broken way
// mutant names, until restore is called:
//
//   - "ignore-delay": contenders take a Lease once its duration is over,
//     as if it carried no delay;
//   - "release-after-end": a holder renews and releases after its lease
//     ended, lifting the delay;
//   - "resume-in-delay": Resume takes back a lease whose duration has run
//     out while its delay runs.
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
