package fenceetcd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fencing/fence"
)

func TestMarkUnavailable(t *testing.T) {
	live := context.Background()
	ended, cancel := context.WithCancel(live)
	cancel()
	wrap := func(err error) error { return fmt.Errorf("fenceetcd: acquire %q: %w", "k", err) }
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"connection refused", live, wrap(status.Error(codes.Unavailable, "connection error: dial tcp: connect: connection refused")), true},
		{"stream lost", live, wrap(status.Error(codes.Unavailable, "error reading from server: EOF")), true},
		{"eof", live, wrap(io.EOF), true},
		{"no leader", live, wrap(rpctypes.ErrNoLeader), true},
		{"no leader, gRPC form", live, wrap(rpctypes.ErrGRPCNoLeader), true},
		{"leader changed", live, wrap(rpctypes.ErrLeaderChanged), true},
		{"request timed out", live, wrap(rpctypes.ErrTimeout), true},
		{"timed out, leader failed", live, wrap(rpctypes.ErrTimeoutDueToLeaderFail), true},
		{"timed out, connection lost", live, wrap(rpctypes.ErrTimeoutDueToConnectionLost), true},
		{"timed out in etcd", live, wrap(rpctypes.ErrGRPCDeadlineExceeded), true},
		{"proposal timed out in etcd", live, wrap(status.Error(codes.Unknown, context.DeadlineExceeded.Error())), true},
		{"unknown", live, wrap(status.Error(codes.Unknown, "etcdserver: some new error")), false},
		{"session gone", live, wrap(fmt.Errorf("%w: no keepalive answered within its TTL", errSessionGone)), true},
		{"waiter lease gone", live, wrap(fmt.Errorf("%w: %w", errWaitLeaseGone, errSessionGone)), true},
		{"driver's own deadline", live, wrap(context.DeadlineExceeded), true},
		{"caller's context ended", ended, wrap(context.Canceled), false},
		{"unavailable, caller's context ended", ended, wrap(rpctypes.ErrNoLeader), false},
		{"held", live, &fence.HeldError{Key: "k"}, false},
		{"driver closed", live, wrap(errClosed), false},
		{"entry deleted by someone", live, wrap(errEntryGone), false},
		{"client closed", live, wrap(status.Error(codes.Canceled, "grpc: the client connection is closing")), false},
		{"compacted", live, wrap(rpctypes.ErrCompacted), false},
		{"permission denied", live, wrap(rpctypes.ErrPermissionDenied), false},
		{"unsupported", live, wrap(fence.ErrUnsupported), false},
	} {
		got := markUnavailable(c.ctx, c.err)
		if errors.Is(got, fence.ErrUnavailable) != c.want {
			t.Errorf("%s: markUnavailable(%v) matches fence.ErrUnavailable: %v; want %v", c.name, c.err, !c.want, c.want)
		}
		if !errors.Is(got, c.err) || got.Error() != c.err.Error() {
			t.Errorf("%s: markUnavailable(%v) = %v: the error's chain and message must stay", c.name, c.err, got)
		}
	}
	if markUnavailable(live, nil) != nil {
		t.Error("markUnavailable(nil) is not nil")
	}
}
