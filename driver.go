package fence

import (
	"context"
	"fmt"
	"time"
)

// Driver is the store side of fence: the few atomic operations one store
// offers. A driver holds no waiting, renewal or validity logic; the Client
// owns all of that, the way database/sql owns pooling over
// database/sql/driver.
//
// Extra powers are optional interfaces that the Client discovers by type
// assertion: [Watcher], [BlockingAcquirer], [Inspector], [Lister],
// [BatchExtender] and others on the Driver, and [SessionClaim] on a
// [Claim].
//
// A Driver must be safe for concurrent use. The conformance suite in
// package fencetest checks every rule a driver must keep.
type Driver interface {
	// TryAcquire makes exactly one attempt to take req.Key (of req.Kind)
	// for req.Owner
	// for at least req.TTL and, in the same atomic step, issues the next
	// fencing token for the key: an integer > 0 strictly greater than every
	// token issued before for that key, by any client.
	//
	// If the key is held, TryAcquire returns a *HeldError (which matches
	// ErrHeld), with the holder filled in where the store tells it
	// cheaply. It must never wait for the key to become free.
	//
	// A driver that cannot grant exactly req.TTL must grant more, never
	// less: the Client measures validity from req.TTL.
	//
	// An error that says the store could not answer for now (a connection
	// refused or lost, a cluster without a leader) matches
	// ErrUnavailable, here and in the other acquisitions, so that a
	// waiting Acquire waits through it.
	TryAcquire(ctx context.Context, req Request) (Claim, error)
}

// Request is one acquisition attempt, as the Client hands it to a Driver.
// The Client has validated every field before the driver sees it.
type Request struct {
	// Key names the lock. It is non-empty valid UTF-8 without NUL bytes and
	// at most MaxKeyLen bytes; a driver with a tighter limit maps long keys
	// (for example by hashing) rather than refusing them where it can.
	Key string
	// Owner is unique to this acquisition and unguessable. Drivers compare
	// it on extend and release, so one acquisition can never extend or
	// release another's lease.
	Owner string
	// TTL is how long the store keeps the lease without a renewal.
	TTL time.Duration
	// Meta is informational holder metadata (host, pid, caller's fields).
	// Drivers store it where they can and return it from Inspect.
	Meta map[string]string
	// Kind is what is acquired: a lock (the zero value), a semaphore slot,
	// or the read or write side of a reader-writer lock. A driver sees a
	// kind other than KindLock only if it reports support for it through
	// KindSupporter. Each kind is its own namespace of keys in the store.
	Kind Kind
	// Limit is, for KindSemaphore, how many holders the key admits at once.
	Limit int
	// SkipHolder tells TryAcquire that the caller has no use for
	// HeldError.Holder: it is about to wait in the driver's Acquire
	// (BlockingAcquirer), and reads the holder itself (Inspect) if the
	// wait ends without the key. It is set for KindLock only, and
	// depends on the call alone, never on whether the Client is observed
	// or traced. A driver that learns the holder only by a read of its
	// own may then leave Holder nil; it still returns a *HeldError.
	SkipHolder bool
	// LockDelay, if positive, is how long the key stays blocked after
	// this lease ends without a release (its TTL ran out, its session
	// dropped): until LockDelay after the store noticed, TryAcquire by
	// anyone returns a *HeldError, and Extend and Release of this claim
	// return ErrNotHeld. A Release while the lease is live frees the key
	// at once. The driver sees it only if it implements LockDelayer and
	// reports support for req.Kind; it keeps it with the lease in the
	// store, so that it binds every later contender.
	LockDelay time.Duration
}

// Kind is what an acquisition takes.
type Kind uint8

// The kinds of acquisition.
const (
	// KindLock: one holder at a time.
	KindLock Kind = iota
	// KindSemaphore: up to Request.Limit holders at once. The driver refuses
	// (with an error matching ErrLimitMismatch) a request whose Limit
	// differs from the one the key's current holders were granted with.
	KindSemaphore
	// KindRead: the shared side of a reader-writer lock; many readers hold
	// at once, never beside a writer. A waiting writer keeps new readers
	// out, so a stream of readers cannot starve it.
	KindRead
	// KindWrite: the exclusive side of a reader-writer lock. Its token is
	// greater than the tokens of every reader granted before it.
	KindWrite
)

func (k Kind) String() string {
	switch k {
	case KindLock:
		return "lock"
	case KindSemaphore:
		return "semaphore"
	case KindRead:
		return "read"
	case KindWrite:
		return "write"
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// KindSupporter is implemented by drivers that can acquire more than locks.
type KindSupporter interface {
	// Supports reports whether TryAcquire (and Acquire, for a
	// BlockingAcquirer) handle requests of kind k. Every driver handles
	// KindLock.
	Supports(k Kind) bool
}

// Claim is a driver's handle on one granted lease. The Client never calls
// the methods of one Claim concurrently, and calls none after Release.
type Claim interface {
	// Token returns the fencing token issued with this acquisition.
	Token() int64
	// Extend pushes the lease's expiry to at least ttl from now, only if
	// the store still holds it for this owner (compare-and-extend). It
	// returns an error matching ErrNotHeld if the store no longer does.
	Extend(ctx context.Context, ttl time.Duration) error
	// Release deletes the lease only if the store still holds it for this
	// owner (compare-and-delete). It returns an error matching ErrNotHeld
	// if the store no longer does; it must never remove another owner's
	// lease.
	Release(ctx context.Context) error
}

// SessionClaim is a Claim bound to a connection or session (an advisory
// lock on a dedicated connection, an etcd or ZooKeeper session) whose loss
// the driver detects itself (a watch, a keepalive, a goroutine reading the
// connection). The driver reports the loss by calling a function the
// Client registers, so the Client runs nothing of its own per lease to
// learn of it.
type SessionClaim interface {
	Claim
	// NotifyLost registers f. The Client calls it once, right after the
	// claim is granted and before any other method. The driver calls f
	// exactly once, with the cause, when the session holding the lease is
	// gone: at once (before NotifyLost returns or soon after) if it was
	// gone already, so that a loss before the registration is never
	// missed. It calls f from any goroutine and without holding locks f
	// could need, and may still do so during or after Release; the Client
	// then ignores it.
	NotifyLost(f func(cause error))
}

// Watcher is implemented by drivers that can notify waiters of a change
// to a key (pub/sub, LISTEN/NOTIFY, watches), so Acquire need not poll.
type Watcher interface {
	// Watch returns a channel that receives a value whenever key may have
	// been released, in any kind the driver supports. Several changes may be coalesced into one value. The
	// driver stops watching and releases everything it holds for the watch
	// when ctx is done; it may close the channel then, or if the watch
	// breaks (the Client falls back to polling).
	Watch(ctx context.Context, key string) (<-chan struct{}, error)
}

// BlockingAcquirer is implemented by drivers whose store itself queues and
// wakes waiters (a server-side blocking lock call, a FIFO queue of
// contenders). Acquire then waits inside the driver instead of polling.
type BlockingAcquirer interface {
	// Acquire blocks until the lease is granted or ctx is done. When ctx
	// is done first it returns ctx's error and leaves nothing behind in
	// the store (no queue entry, no pending lock request).
	Acquire(ctx context.Context, req Request) (Claim, error)
}

// Inspector is implemented by drivers that can tell who holds a key.
type Inspector interface {
	// Inspect returns the current holder of key, or an error matching
	// ErrNotHeld if the key is free.
	Inspect(ctx context.Context, key string) (Holder, error)
}

// Lister is implemented by drivers that can enumerate held keys.
type Lister interface {
	// List returns the holders of every held key that starts with prefix,
	// sorted by key.
	List(ctx context.Context, prefix string) ([]Holder, error)
}

// WaiterCounter is implemented by drivers whose store knows how many
// contenders wait for a key (a server-side queue of waiters, watches it
// counts). Most stores cannot tell; the CLI then shows "-".
type WaiterCounter interface {
	// Waiters returns how many contenders wait for key now.
	Waiters(ctx context.Context, key string) (int, error)
}

// Holder describes who holds a key, as far as the store can tell.
type Holder struct {
	// Key is the lock's key.
	Key string
	// Owner is the holder's owner id; empty if unknown.
	Owner string
	// Token is the holder's fencing token; 0 if unknown.
	Token int64
	// ExpiresIn is the time left before the store frees the key unless the
	// holder renews it, as the store measured it when asked; 0 if unknown
	// or if the lease ends only with its session.
	ExpiresIn time.Duration
	// Meta is the holder's metadata (for example "host" and "pid"), where
	// the store keeps it.
	Meta map[string]string
}

// MultiAcquirer is implemented by drivers whose store can take several
// keys in one atomic step (one script, one statement, one transaction).
// Client.AcquireAll then makes each attempt with it; without it, the
// Client takes the keys one by one in sorted order.
type MultiAcquirer interface {
	// TryAcquireAll makes exactly one attempt to take every reqs[i].Key,
	// all of one kind (KindLock), in one atomic step: it returns one claim
	// per request, in order, each with its own token as TryAcquire would
	// issue it, or no claim at all and nothing changed in the store. If a
	// key is held, the error is a *HeldError for that key. The keys are
	// distinct and sorted.
	//
	// If the store cannot take these keys in one step (say, Redis Cluster
	// keys in different slots), it returns an error matching
	// ErrUnsupported without changing anything, and the Client takes them
	// one by one instead.
	TryAcquireAll(ctx context.Context, reqs []Request) ([]Claim, error)
}

// BatchExtender is implemented by drivers whose store can extend many
// claims in one round trip (a pipeline, one statement). The Client then
// renews the leases whose renewals fall due together in one call instead
// of one call each; the Client alone decides which leases go together and
// when (see docs/leases.md).
type BatchExtender interface {
	// Batchable reports whether ExtendBatch takes c, a claim this driver
	// granted. It answers from c alone, without the store, and the same
	// every time for one claim. A claim the driver does not know (one a
	// wrapping driver made) is not batchable: the Client then calls its
	// Extend as for any other driver.
	Batchable(c Claim) bool
	// ExtendBatch extends each claims[i] by ttls[i], each exactly as
	// claims[i].Extend(ctx, ttls[i]) would (compare-and-extend, keeping
	// whatever else Extend keeps, such as a lock-delay), in as few round
	// trips as the store allows. The claims are distinct, each one
	// Batchable, and none is used by another call meanwhile; ttls has one
	// entry per claim.
	//
	// It returns one result per claim, in order (len(claims) of them):
	// nil if that claim was extended, an error matching ErrNotHeld if the
	// store no longer holds that claim's lease for its owner, or another
	// error (a transport error, ctx's) if that claim's extension failed
	// or its outcome is unknown. A claim refused, or failed, leaves the
	// others' results as they would be alone: one lease lost in the store
	// never fails the renewal of another. ctx bounds the whole call.
	ExtendBatch(ctx context.Context, claims []Claim, ttls []time.Duration) []error
}

// LockDelayer is implemented by drivers that keep a lock-delay
// (Request.LockDelay) with a lease. The Client refuses WithLockDelay
// with ErrUnsupported on other drivers.
type LockDelayer interface {
	// SupportsLockDelay reports whether the driver keeps Request.LockDelay
	// for requests of kind k.
	SupportsLockDelay(k Kind) bool
}
