package fencedynamo

import (
	"time"

	"github.com/fencing/fence/internal/kit/sighting"
)

// SetTestHook sets the function called after an acquisition reads the
// item, before it writes, until restore is called. Tests that set it must
// not run in parallel.
func SetTestHook(afterRead func(key string)) (restore func()) {
	testHookRead = afterRead
	return func() { testHookRead = nil }
}

// SetWatchMutant makes every Store judge expiry the broken way mutant
// names, until restore is called:
//
//   - "expired-at-first-look": a held item is over when first seen, as
//     for a driver that trusts a record's write time against its own
//     clock and finds the write a TTL old;
//   - "version-blind": the watch follows the holder's owner id, not the
//     record version, so a renewal does not restart it.
//
// Tests that set it must not run in parallel.
func SetWatchMutant(mutant string) (restore func()) {
	switch mutant {
	case "expired-at-first-look":
		testHookWatch = func(*sighting.Book, string, *item, time.Duration, time.Time) time.Duration { return 0 }
	case "version-blind":
		testHookWatch = func(b *sighting.Book, name string, it *item, ttl time.Duration, at time.Time) time.Duration {
			return b.Left(name, it.owner, ttl, at)
		}
	default:
		panic("no mutant " + mutant)
	}
	return func() { testHookWatch = nil }
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
//     the item carried no delay;
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
