package fenceetcd

import (
	"context"
	"errors"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencing/fence/internal/kit/unavail"
)

// markUnavailable marks err, an acquisition's under ctx, with
// fence.ErrUnavailable if etcd could not answer for now (see unavailable),
// so that a waiting Acquire waits through it. An error once ctx has ended
// is the end of the caller's wait, and stays as it is.
func markUnavailable(ctx context.Context, err error) error {
	return unavail.MarkLive(ctx, err, unavailable)
}

// passing reports whether err, from any call, says etcd or the way to it
// could not answer for now: unavailable, or a network error.
func passing(err error) bool { return unavail.Network(err) || unavailable(err) }

// unavailable reports whether err says etcd could not answer for now,
// beyond the connection errors unavail.Network knows. The etcd errors are
// those of go.etcd.io/etcd/api/v3/v3rpc/rpctypes (error.go): the client
// returns them as rpctypes.EtcdError (translated by rpctypes.Error, in
// clientv3.ContextError), or as gRPC statuses where it has no translation.
func unavailable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable:
		// gRPC's: no connection to any endpoint (refused, lost, "transport
		// is closing", "error reading from server: EOF"), and the etcd
		// errors of this code the client leaves untranslated
		// (ErrGRPCTimeoutWaitAppliedIndex).
		return true
	case codes.DeadlineExceeded:
		// A request timed out in etcd (ErrGRPCDeadlineExceeded), while
		// the caller's context lives (markUnavailable).
		return true
	case codes.Unknown:
		// etcd's server hands a proposal's own timeout (a Propose that
		// waited its request timeout on a member without quorum) to gRPC
		// as the bare context.DeadlineExceeded (v3rpc togRPCError), which
		// a gRPC server of etcd's builds sends as code Unknown with the
		// context error's text. The caller's context lives
		// (markUnavailable), so the deadline was etcd's.
		var st interface{ GRPCStatus() *status.Status }
		if errors.As(err, &st) && st.GRPCStatus().Message() == context.DeadlineExceeded.Error() {
			return true
		}
	}
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) {
		switch etcdErr {
		case rpctypes.ErrNoLeader, // the member has no leader: an election runs, or it lost the quorum
			rpctypes.ErrLeaderChanged,              // the leader changed while the request was in flight
			rpctypes.ErrStopped,                    // the member is shutting down
			rpctypes.ErrUnhealthy,                  // the member found the cluster unhealthy
			rpctypes.ErrTimeout,                    // the request was not committed in time
			rpctypes.ErrTimeoutDueToLeaderFail,     // likewise, as the previous leader failed
			rpctypes.ErrTimeoutDueToConnectionLost: // likewise, as the member lost its peers
			return true
		}
	}
	// The session or waiter lease ended during the acquisition: no
	// keepalive answered within its TTL (etcd down, or electing a leader
	// after the client's member died), or etcd says it is gone. The entry
	// bound to it is deleted (Store.abandon) or expires with it; a new
	// attempt takes a new lease. A driver's own deadline on etcd (a
	// keepalive bounded by the session's life) that passed while the
	// caller's context lives is such a wait for etcd too.
	return errors.Is(err, errSessionGone) || errors.Is(err, errWaitLeaseGone) || errors.Is(err, context.DeadlineExceeded)
}
