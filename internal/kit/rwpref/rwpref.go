// Package rwpref is the writer preference of fence's reader-writer locks,
// written once: once a writer waits, new readers wait too, so a stream of
// readers cannot starve it. Drivers keep it one of two ways, and take the
// decision from here:
//
//   - Stores that grant from a lock's current state (fencemem, fencefile,
//     fenceredis) keep a waiting writer's mark: Decide says, in each
//     atomic attempt, whether to grant, refuse, or refuse and set the mark
//     for Intent. A writer that stops waiting lets its mark lapse; its
//     grant clears it. (fenceredis decides in a Lua script, which mirrors
//     Decide and takes Intent from here.)
//   - Stores that queue waiters in order (fenceetcd, fencezk) let each
//     entry wait for the one WaitsFor names: a reader queued behind a
//     writer waits for it, and readers queued together hold together.
//
// fencepg's session mode needs neither: PostgreSQL queues a lock request
// behind a waiting one that conflicts with it.
package rwpref

import "time"

// MinIntent is the shortest life of a waiting writer's mark. The Client
// retries a waiting acquisition at least once a second, and every attempt
// renews the mark, which must not lapse in between.
const MinIntent = 2 * time.Second

// Intent returns how long the mark of a writer waiting with ttl keeps new
// readers out after each of its attempts.
func Intent(ttl time.Duration) time.Duration { return max(ttl, MinIntent) }

// Lock is a reader-writer lock as one atomic attempt finds it, expired
// holders and a lapsed mark left out.
type Lock struct {
	Readers     bool // readers hold it
	Writer      bool // a writer holds it
	WriterWaits bool // a waiting writer's mark
}

// Step is what an atomic attempt does.
type Step uint8

const (
	// Grant the attempt. A writer's grant clears the mark.
	Grant Step = iota
	// Refuse the attempt: the key is held, or a writer waits.
	Refuse
	// Intend: refuse a writer and set the mark for Intent(ttl) from now.
	Intend
)

// Decide returns what an attempt of a writer (write) or a reader does
// with l.
func Decide(write bool, l Lock) Step {
	switch {
	case write && (l.Writer || l.Readers):
		return Intend
	case write:
		return Grant
	case l.Writer || l.WriterWaits:
		return Refuse
	}
	return Grant
}

// WaitsFor returns the index of the entry that entry i of an ordered queue
// of a reader-writer lock waits for, -1 if none, where shared(j) tells
// readers: for a reader, the last writer before it; for a writer, the
// entry just before it.
func WaitsFor(i int, shared func(j int) bool) int {
	if !shared(i) {
		return i - 1
	}
	for j := i - 1; j >= 0; j-- {
		if !shared(j) {
			return j
		}
	}
	return -1
}
