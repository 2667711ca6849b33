// Package sighting judges expiry the way stores without a trusted clock
// must: a lease record is over only once this process has seen it
// unchanged (the same version: an ETag, a resourceVersion) for a full
// lease duration on its own monotonic clock, never by comparing another
// machine's timestamps with its own. The Azure Table, DynamoDB and
// Kubernetes stores share it.
package sighting

import (
	"sync"
	"time"
)

// Max bounds how many records a Book remembers. Past it, all are
// forgotten: that only delays takeovers (each wait starts again), never
// hastens one.
const Max = 100_000

// Book remembers, per record name, the first time a version of it was
// seen. The zero Book is ready; it is safe for concurrent use.
type Book struct {
	mu   sync.Mutex
	seen map[string]seen
}

type seen struct {
	version string
	at      time.Time // monotonic
}

// Left records that a read that came back at at showed name at version,
// held for ttl, and returns what is left of the lease as this process can
// tell: ttl from the first time it saw that version. A result <= 0 means
// the holder has written nothing for a full ttl: the lease is over.
func (b *Book) Left(name, version string, ttl time.Duration, at time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.seen[name]
	if !ok || s.version != version {
		if b.seen == nil || len(b.seen) >= Max {
			b.seen = make(map[string]seen)
		}
		s = seen{version: version, at: at}
		b.seen[name] = s
	}
	return ttl - at.Sub(s.at)
}

// Forget drops what was seen of name, as after this process wrote it.
func (b *Book) Forget(name string) {
	b.mu.Lock()
	delete(b.seen, name)
	b.mu.Unlock()
}
