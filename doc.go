// Package fence provides distributed locks that stay safe when clocks
// drift, processes pause and networks split.
//
// A distributed lock is a lease: it expires so that a crashed holder cannot
// block the key forever, and that expiry is also its danger, because a
// holder paused by a GC, a frozen container or a partition can go on
// believing it holds a lease the store has already given to someone else.
// So every lease fence grants carries a fencing token, a number that grows
// with every acquisition of the key. The holder sends the token with every
// write to the protected resource, and the resource refuses a token lower
// than one it has already accepted. A paused-and-resumed old holder's write
// then fails instead of overwriting the new holder's work.
//
// # Use
//
// A Client wraps a Driver for one store (fencemem, fencefile, fenceredis,
// fencepg, ...):
//
//	c := fence.New(driver)
//	lease, err := c.Acquire(ctx, "invoice-job", fence.WithTTL(time.Minute))
//	if err != nil { ... }
//	defer lease.Release(context.Background())
//	// Work under lease.Context(): it is cancelled the moment the lease is
//	// lost. Send lease.Token() with every write to the resource.
//
// TryAcquire returns at once with a *HeldError (errors.Is(err, ErrHeld))
// when the key is held. Run acquires, runs a function under the lease and
// releases; with SkipIfHeld it is the scheduled-job helper ("another
// instance is running it"). Election is leader election over a key.
//
// # Semantics
//
//   - At most one lease per key is valid at a time, in the store's view.
//   - Every acquisition of a key gets a token greater than every earlier
//     one, from any client; tokens are int64 values > 0.
//   - A lease is valid locally until the moment its last successful
//     acquire or renew request was sent, plus the TTL, minus a drift margin,
//     on this machine's monotonic clock. No other machine's clock is
//     trusted.
//   - Leases renew themselves every TTL/3. When the store refuses a
//     renewal, when validity runs out before a renewal succeeds, or when
//     the session holding the lease drops, the lease is lost: its context
//     is cancelled at once, with a *LostError as the cause.
//   - Release is compare-and-delete: it never removes another owner's
//     lease. Releasing a lost or released lease is harmless and says so.
//   - A lost lease never ends in success: a loss found only by the
//     release (the store no longer held the lease) is a loss too, and
//     Release, Run, Election's Resign and Lead, and Close return it as a
//     *LostError (ErrLost).
//   - Leases are not reentrant: a second Acquire of a held key waits, even
//     from the same Client.
//
// # Drivers
//
// A Driver does only its store's atomic operations: try-acquire once
// (issuing the token), compare-and-extend, compare-and-delete, and optional
// capabilities (Watcher, BlockingAcquirer, Inspector, Lister,
// SessionClaim). Everything else lives here, once. Package fencetest is
// the conformance suite every driver passes.
//
// # Observability
//
// A Client reports its events (acquisitions, waits, renewals, releases,
// losses) to an Observer given with WithObserver, and logs through the
// slog.Logger given with WithLogger; without them it records nothing, at
// no cost. Package fenceotel, a module of its own, is the OpenTelemetry
// Observer; this package depends on no telemetry library.
package fence
