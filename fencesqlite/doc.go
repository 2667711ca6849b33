// Package fencesqlite is fence on an SQLite database file, through
// modernc.org/sqlite (pure Go, no cgo): a lease store for several
// processes of one host that would rather share a database file than a
// directory of lock files, and a store for tests that needs no server.
//
// It keeps the lease rows of fencepg's lease mode: one row per key in the
// table fence_locks, with the key's owner, its expiry and its token.
// Every operation is one short write transaction begun with BEGIN
// IMMEDIATE, so that it holds the database's write lock from its first
// statement: acquiring inserts the key's row or takes over a free or
// expired one, bumping its token, in one statement
//
//	INSERT ... ON CONFLICT (key) DO UPDATE
//	    SET token = max(token + 1, <now in µs>), owner = ..., expires_us = ...,
//	        delay_us = ...
//	    WHERE owner IS NULL OR expires_us + delay_us <= <now in µs>
//	RETURNING token
//
// and, if the key is held, reads the holder in the same transaction.
// Renewal and release compare the owner. Releasing clears the owner and
// keeps the row and its token.
//
// The Store keeps a lock-delay (fence.WithLockDelay, fence.LockDelayer)
// in the lease's row, delay_us: the row blocks the key until its expiry
// plus the delay, by the same clock as the expiry, in the acquire
// statement itself. Renewal, release and Resume of a lease whose expiry
// has passed are refused, so its holder can neither revive it nor lift
// the delay; Inspect and List show it until the key is free. Open adds
// the column to a table made by an earlier version.
//
// The database is opened in WAL mode (readers never block the writer and
// the writer never blocks readers) with a busy timeout (WithBusyTimeout,
// 5 s by default): a transaction that finds another process writing waits
// for the write lock up to the timeout or the context's end, whichever
// comes first, and then fails with SQLite's "database is locked". Write
// transactions here last microseconds (plus the fsync of the commit), so
// the timeout is reached only if some other program holds a long write
// transaction on the same file.
//
// # Time
//
// SQLite has no server and no clock of its own: expiry is judged by the
// wall clock of the process that writes, read once the transaction holds
// the write lock. All processes sharing the file are on one host and read
// the same clock, so they agree on it. A row's expiry is the writer's
// wall-clock time plus the TTL, in microseconds since 1970. If the host's
// wall clock is stepped:
//
//   - backwards by d: every lease in the file lasts d longer in the store
//     (a dead holder's key stays blocked d longer); nothing is shared
//     wrongly;
//   - forwards by d: every lease in the file ends d earlier in the store,
//     and a contender may take a key whose holder still believes it holds
//     it. The holder measures its own validity on its monotonic clock
//     (fence's core, docs/design.md rule 3), not on the wall clock, so it
//     goes on working until that ends: the two overlap, and only the
//     fencing token (checked by a guard at the resource) keeps the old
//     holder's late writes out. A jump forwards of more than the margin
//     between renewals is therefore a lease loss, as a long pause is.
//
// NTP's slewing (gradual adjustment) is harmless; only steps matter.
//
// # Tokens
//
// Each token is max(previous+1, wall clock in µs since 1970): while the
// key's row exists tokens grow whatever the clock does. If the row is
// deleted behind fence's back (a DELETE, the file replaced by an older
// copy or removed), the next token is the clock's reading, above every
// earlier token as long as the host's clock was not set back, between the
// last grant before the loss and the first one after it, by as much as
// the time that passed between them.
//
// # Waiting
//
// SQLite tells no other process of a commit. On Linux the Store is a
// fence.Watcher all the same: every commit that changes the database
// appends to its -wal file, and Watch wakes waiters on inotify's news of
// a write to it (of any key: a waiter then makes one attempt, which writes
// nothing, so waiters do not wake each other). Elsewhere the Client polls
// with backoff and jitter. In both cases it also wakes at the holder's
// reported expiry (the HeldError carries it). There is no queue and no
// fairness.
//
// # Network file systems
//
// SQLite's WAL mode needs shared memory between the processes (the -shm
// file, mapped into each) and POSIX locks that work: neither holds on a
// network file system, where two hosts would each see the lock free. Open
// refuses a database on NFS, SMB/CIFS, 9p, FUSE and the other network or
// user-space file systems Linux reports through statfs, with an error
// matching ErrNetworkFS. Elsewhere the check is not made: keep the file
// on a local disk. See docs/sqlite.md.
package fencesqlite
