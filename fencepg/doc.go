// Package fencepg is fence on PostgreSQL, through pgx (a *pgxpool.Pool),
// in three modes, and the resource-side guard for pgx transactions.
//
// # Modes
//
// Lease mode (NewLeaseStore, the default choice) keeps one row per key in
// a lock table: owner, expiry and token. Acquiring is one statement that
// inserts the row or takes over a free or expired one, bumping its token
// (when the key is held, a second statement reads the holder):
//
//	INSERT ... ON CONFLICT (key) DO UPDATE
//	    SET token = greatest(token + 1, <server clock in µs>), ...
//	    WHERE owner IS NULL OR expires_at + lock_delay <= clock_timestamp()
//
// Only the database's clock judges expiry. Renewal and release compare the
// owner. Releasing keeps the row and its token, so tokens never go back;
// seeding every token from the server's clock keeps them going up even
// after a failover to an asynchronous replica that lost the last bumps,
// assuming the new primary's clock is not behind the old one's. Release
// sends a NOTIFY on which waiters wake (one LISTEN connection per
// driver, shared by all its waiters); waiters also wake at the holder's
// reported expiry. The lock is ordinary data: it survives reconnects,
// restarts and a failover to a synchronous replica.
//
// Lease mode keeps a lock-delay (fence.WithLockDelay, fence.LockDelayer)
// for locks in the lease's row, lock_delay: the row blocks the key until
// its expiry plus the delay, by the server's clock, in the acquire
// statement itself (and in each statement of TryAcquireAll). Renewal,
// release and Resume of a lease whose expiry has passed are refused, so
// its holder can neither revive it nor lift the delay; Inspect, List and
// the refused try show it until the key is free, and waiters wake then.
// Session and transaction modes refuse the option.
//
// Session mode (NewSessionStore) holds a session advisory lock,
// pg_advisory_lock(AdvisoryID(key)), on a connection dedicated to the
// lease, and bumps the key's token in a counter table on that connection.
// Waiting happens in the server; a cancelled wait is cancelled in the
// server too. The key is freed the moment the holder's connection ends,
// and the holder learns of its own connection's end at once (the lease's
// context is cancelled; in a lease's first 100 ms, when its connection
// starts being watched), so no TTL has to pass after a crash. Advisory
// locks live in the server's memory: they do not survive a restart or a
// failover.
//
// Transaction mode (TxLocker) takes pg_advisory_xact_lock and bumps the
// token inside the caller's pgx.Tx, for work done in that same
// transaction; the lock ends with the transaction.
//
// Lease mode also does semaphores (a row per slot); session mode also
// does reader-writer locks (pg_advisory_lock_shared for readers), with
// PostgreSQL's lock queue keeping new readers behind a waiting writer.
// Their counters live in the kinds table.
//
// Session and transaction modes share advisory ids and the counter table,
// so they exclude each other on a key; lease mode is separate: do not lock
// one key in lease mode and in another mode.
//
// # Availability
//
// The acquisitions' errors that say PostgreSQL could not answer for now (a
// connection refused or lost, a server starting up, shutting down or out
// of connections: see unavailable.go) match fence.ErrUnavailable, so a
// Client's waiting Acquire waits through them, on a new connection.
// TxLocker's errors are those of the caller's transaction, and are not
// marked: a retry needs a new transaction.
//
// # Schema
//
// Setup creates the tables (idempotently), and adds lock_delay to a lock
// table made by an earlier version; WithAutoSetup makes a driver do it on
// first use. WithTables renames them; names are validated and
// quoted. Keys map to advisory ids by AdvisoryID (the first 8 bytes of the
// key's SHA-256); each key is stored beside its id, so a collision is
// refused with ErrKeyCollision instead of silently sharing a lock.
//
// # Guards
//
// Guard.Admit checks and records a fencing token for a resource in one
// statement inside the caller's transaction, atomic with the write that
// follows. See docs/guards.md for the fenced-column pattern.
//
// See docs/postgres.md for what each mode guarantees and what it does not.
package fencepg
