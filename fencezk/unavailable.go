package fencezk

import (
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/unavail"
)

// unavailable reports whether err, from go-zookeeper (v1.0.4: conn.go,
// constants.go), says that ZooKeeper could not answer for now. The client
// reconnects on its own, to the next server of its list, once a second
// after it has tried them all.
//
// Not among them: zk.ErrClosing, which the client gives only the requests
// that its user's Close cuts short (code -116 is the C client's ZCLOSING;
// servers never send it), and the errors that answer the request (no
// node, node exists, bad version, no auth).
func unavailable(err error) bool {
	for _, e := range []error{
		// No server of the list took a connection: requests waiting to be
		// sent fail with it each time the client has tried them all
		// (Conn.connect).
		zk.ErrNoServer,
		// The connection broke with the request in flight or waiting to
		// be sent (Conn.loop, Conn.sendData). Requests made after the
		// user's Close get it too: mark tells those apart by the driver's
		// own closed state.
		zk.ErrConnectionClosed,
		// The session moved to another server's connection while the
		// request went through the old one (server code -118).
		zk.ErrSessionMoved,
		// The session expired while the request was in flight, or while
		// an entry of this acquisition waited in its queue (its watch
		// ends with it, entryLost): the server deleted the session's
		// znodes, and the client opens a new session on its next
		// connection (Conn.authenticate clears the session id), in which
		// the acquisition can queue again. A held lease's session expiry
		// is a loss, which its claim's watch reports; no acquisition
		// returns it.
		zk.ErrSessionExpired,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// mark marks err, an acquisition's, with fence.ErrUnavailable if it says
// ZooKeeper could not answer for now (unavail.Network, unavailable), not
// once the driver is closed: its connection's zk.ErrConnectionClosed then
// says so.
func (d *Store) mark(err error) error {
	if d.ctx.Err() != nil {
		return err
	}
	return unavail.Mark(err, unavailable)
}

// passing reports whether err says ZooKeeper could not answer for now.
func (d *Store) passing(err error) bool { return errors.Is(d.mark(err), fence.ErrUnavailable) }

// entryLost returns err, from a step on a queue entry that session sid
// created, wrapping zk.ErrSessionExpired if the entry is gone and sid has
// ended since: the server deleted the entry with its session. A request
// the client sent only once it had its new session finds the entry gone
// (errEntryGone, or zk.ErrNoNode from a check of it), not the expiry.
//
// An entry gone in the same session was deleted behind fence's back (its
// queue's znode removed, or the whole root): the error says so, rather
// than a bare zk.ErrNoNode from whichever read found it missing.
func (d *Store) entryLost(err error, sid int64) error {
	gone := errors.Is(err, errEntryGone) || errors.Is(err, zk.ErrNoNode)
	if gone && !errors.Is(err, errEntryGone) {
		err = fmt.Errorf("%w: %w", errEntryGone, err)
	}
	if !gone || errors.Is(err, zk.ErrSessionExpired) || d.conn.SessionID() == sid {
		return err
	}
	return fmt.Errorf("%w: %w", err, zk.ErrSessionExpired)
}
