package fencemysql

import (
	"context"
	"database/sql/driver"
	"errors"

	"github.com/go-sql-driver/mysql"

	"github.com/fencing/fence/internal/kit/unavail"
)

// markUnavailable marks err, an acquisition's under ctx, with
// fence.ErrUnavailable if the server could not answer for now (see
// unavailable), so that a waiting Acquire waits through it. An error once
// ctx has ended is the end of the caller's wait, and stays as it is.
func markUnavailable(ctx context.Context, err error) error {
	return unavail.MarkLive(ctx, err, unavailable)
}

// unavailable reports whether err says the server could not answer for
// now, beyond the connection errors unavail.Network knows. The values are
// go-sql-driver/mysql's (errors.go, packets.go; v1.10.1): a connection that
// broke mid-statement is ErrInvalidConn (readPacket logs the I/O error and
// returns only that), and one found dead before anything was sent is
// database/sql's driver.ErrBadConn, which database/sql retries on a new
// connection for a *sql.DB but returns as it is from the *sql.Conn a lease
// uses. Server errors are *mysql.MySQLError, by number (MySQL's and
// MariaDB's error references).
func unavailable(err error) bool {
	if errors.Is(err, mysql.ErrInvalidConn) || errors.Is(err, driver.ErrBadConn) {
		return true
	}
	var myErr *mysql.MySQLError
	if !errors.As(err, &myErr) {
		return false
	}
	switch myErr.Number {
	case 1040, // ER_CON_COUNT_ERROR: too many connections, sent in the handshake
		1053, // ER_SERVER_SHUTDOWN: the server is shutting down
		// A row or metadata lock on the counter table not granted within
		// innodb_lock_wait_timeout or lock_wait_timeout: another
		// transaction (a user's, a schema change) holds it. The lock on
		// the key is GET_LOCK's, which answers 0, never this: it does not
		// mean the key is held.
		1205, // ER_LOCK_WAIT_TIMEOUT
		// The token bump (INSERT ... ON DUPLICATE KEY UPDATE) chosen as
		// a deadlock victim and rolled back; go-sql-driver/mysql and
		// database/sql do not retry it. The driver's waits in GET_LOCK
		// hold no other lock, so they take no part in a deadlock.
		1213, // ER_LOCK_DEADLOCK
		// Client-library codes (CR_*, errmsg.h): go-sql-driver/mysql
		// reports these cases as ErrInvalidConn or net errors and never
		// builds them, but a proxy in front of the server (ProxySQL) may
		// relay its own connection's failure to the server under them.
		2002, // CR_CONNECTION_ERROR: can't connect through the socket
		2003, // CR_CONN_HOST_ERROR: can't connect to the host
		2006, // CR_SERVER_GONE_ERROR: the server has gone away
		2013: // CR_SERVER_LOST: lost connection during a query
		return true
	}
	return false
}
