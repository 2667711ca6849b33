package fencepg

import (
	"github.com/fencing/fence"
)

// Session mode reader-writer locks are advisory locks on one id per key,
// taken shared by readers (pg_advisory_lock_shared) and exclusive by the
// writer (pg_advisory_lock), on a connection dedicated to each lease like
// a lock's. Their tokens come from the key's counter row in the kinds
// table (kind 'rw', slot -1), one sequence for readers and writers, bumped
// on the holder's connection once the lock is granted, in the same
// statement as the try or the wait.
//
// Writer preference is PostgreSQL's own: a lock request that conflicts
// with the mode another session is waiting for waits behind it (and a
// try fails), so once a writer waits in pg_advisory_lock, new readers
// queue behind it; a writer whose wait is cancelled leaves the queue at
// once.

var _ fence.KindSupporter = (*SessionStore)(nil)

// Supports implements fence.KindSupporter: session mode does locks and
// reader-writer locks (shared and exclusive advisory locks). Semaphores
// are lease mode's: a session cannot wait in the server for whichever of
// several slots frees first.
func (d *SessionStore) Supports(k fence.Kind) bool {
	return k == fence.KindLock || k == fence.KindRead || k == fence.KindWrite
}

// RWAdvisoryID returns the advisory lock id of key's reader-writer lock in
// session mode: AdvisoryID of "rw", a NUL byte and the key. No key holds a
// NUL byte, so it is never a lock's id but by a 64-bit hash collision;
// the kinds table keeps it unique among reader-writer locks.
func RWAdvisoryID(key string) int64 { return AdvisoryID("rw\x00" + key) }

// advisoryLock is how one kind is taken in session mode.
type advisoryLock struct {
	id                                int64
	try, bump, wait, waitBump, unlock string
}

func (d *SessionStore) lockOf(req fence.Request) advisoryLock {
	switch req.Kind {
	case fence.KindRead:
		return advisoryLock{id: RWAdvisoryID(req.Key), try: d.qTryRead, bump: d.qBumpRW,
			wait: "pg_advisory_lock_shared", waitBump: d.qWaitRead, unlock: "SELECT pg_advisory_unlock_shared($1)"}
	case fence.KindWrite:
		return advisoryLock{id: RWAdvisoryID(req.Key), try: d.qTryWrite, bump: d.qBumpRW,
			wait: "pg_advisory_lock", waitBump: d.qWaitWrite, unlock: "SELECT pg_advisory_unlock($1)"}
	}
	return advisoryLock{id: AdvisoryID(req.Key), try: d.qTry, bump: d.qBump,
		wait: "pg_advisory_lock", waitBump: d.qWait, unlock: "SELECT pg_advisory_unlock($1)"}
}

func (d *SessionStore) rwQueries() {
	K := d.ts.kinds.quoted
	// $3 (owner) and $4 (meta) are not stored: many readers share the row.
	bump := func(src, where string) string {
		return `INSERT INTO ` + K + ` AS k (kind, key, slot, lock_id, token)
			SELECT 'rw', $1, -1, $2, ` + clockToken + src + where + `
			ON CONFLICT (kind, key, slot) DO UPDATE SET token = ` + nextToken("k.token") + `
			RETURNING k.token`
	}
	// A try returns no row if the lock was not granted (see qTry).
	try := func(fn string) string {
		return bump(" FROM (SELECT $3::text AS owner, $4::jsonb AS meta) args", " WHERE "+fn+"($2)")
	}
	// A wait and the bump after it, in one statement (see qWait).
	wait := func(fn string) string {
		return `WITH lk AS (SELECT ` + fn + `($2)), args AS (SELECT $3::text AS owner, $4::jsonb AS meta) ` +
			bump(" FROM lk, args", "")
	}
	d.qTryRead = try("pg_try_advisory_lock_shared")
	d.qTryWrite = try("pg_try_advisory_lock")
	d.qWaitRead = wait("pg_advisory_lock_shared")
	d.qWaitWrite = wait("pg_advisory_lock")
	d.qBumpRW = `WITH args AS (SELECT $3::text AS owner, $4::jsonb AS meta) ` + bump(" FROM args", "")
}
