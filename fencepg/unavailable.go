package fencepg

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencing/fence/internal/kit/unavail"
)

// markUnavailable marks err, an acquisition's under ctx, with
// fence.ErrUnavailable if PostgreSQL could not answer for now (see
// unavailable), so that a waiting Acquire waits through it, on a new
// connection. An error once ctx has ended is the end of the caller's
// wait, and stays as it is.
func markUnavailable(ctx context.Context, err error) error {
	return unavail.MarkLive(ctx, err, unavailable)
}

// unavailable reports whether err says PostgreSQL could not answer for
// now, beyond the connection errors unavail.Network knows (a refused or
// lost connection: pgx returns the net package's error, wrapped in a
// *pgconn.ConnectError when connecting, which is also how a pgxpool
// Acquire fails when the server is unreachable). The server's errors are
// *pgconn.PgError (pgconn/errors.go), by SQLSTATE (PostgreSQL's
// Appendix A, "PostgreSQL Error Codes"). A ConnectError is not
// unavailability by itself: a wrong password (28P01) or a missing database
// (3D000) is one too, and must fail at once.
//
// Not here: 25006 read_only_sql_transaction, the answer of a standby (a
// server that is not the primary asked for, not one that is down), and
// 57014 query_canceled, which a statement_timeout or an operator's
// pg_cancel_backend raises, and the driver's own cancel of a wait whose
// context ended.
func unavailable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch code := pgErr.Code; {
		case code == "08P01":
			// protocol_violation: the client and the server disagree on
			// the protocol, which waiting does not mend.
			return false
		case len(code) == 5 && code[:2] == "08":
			// Class 08, connection exception: the connection failed or
			// the server refused to establish it.
			return true
		}
		switch pgErr.Code {
		case "57P01", // admin_shutdown: the server is shutting down (or an operator ended the backend)
			"57P02", // crash_shutdown: another backend crashed; the server restarts
			"57P03", // cannot_connect_now: the server is starting up, in recovery or shutting down
			"53300", // too_many_connections: max_connections (or a role's limit) reached
			// serialization_failure: under a REPEATABLE READ or
			// SERIALIZABLE default isolation, an acquire statement's
			// update of a row that another transaction changed since the
			// statement's snapshot. A new statement takes a new snapshot.
			// (Session mode's wait retries its own: Acquire.)
			"40001",
			// deadlock_detected: TryAcquireAll's transaction locks rows
			// in key order, but a batch renewal (ExtendBatch) may lock
			// the same rows in another order; one of them is aborted.
			"40P01":
			return true
		}
		return false
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		// A deadline of pgx's own that passed while the caller's context
		// lives (markUnavailable): connect_timeout, connecting to a
		// server that does not answer (pgconn.Timeout).
		return pgconn.Timeout(err)
	}
	// An error pgx says occurred before anything was sent (SafeToRetry):
	// a connection pgx closed after it broke (pgconn.ErrConnClosed), or a
	// write to a broken connection. (Its other cases, a connection busy or
	// not initialized, cannot happen in the driver's acquisitions.)
	return pgconn.SafeToRetry(err)
}
