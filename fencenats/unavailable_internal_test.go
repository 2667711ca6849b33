package fencenats

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencing/fence"
)

// TestUnavailable: the errors that say NATS could not answer for now, as
// the acquisitions return them, and some that do not.
func TestUnavailable(t *testing.T) {
	ours, cancel := context.WithTimeoutCause(context.Background(), time.Nanosecond, errNoReply)
	defer cancel()
	<-ours.Done()
	callers, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-callers.Done()
	live := context.Background()
	api := func(code jetstream.ErrorCode) error {
		return fmt.Errorf("nats: %w", &jetstream.APIError{ErrorCode: code}) // as a publish returns it
	}
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"no stream response", live, jetstream.ErrNoStreamResponse, true},
		{"no responders", live, fmt.Errorf("fencenats: acquire %q: %w", "k", nats.ErrNoResponders), true},
		{"reconnecting", live, nats.ErrConnectionReconnecting, true},
		{"reconnect buffer", live, nats.ErrReconnectBufExceeded, true},
		{"no meta leader", live, api(jsClusterNotAvail), true},
		{"not the leader", live, api(jsClusterNotLeader), true},
		{"stream offline", live, api(jsStreamOffline), true},
		{"driver's deadline", ours, context.DeadlineExceeded, true},
		{"caller's deadline", callers, context.DeadlineExceeded, false},
		{"closed by its user", live, nats.ErrConnectionClosed, false},
		{"wrong revision", live, api(jetstream.JSErrCodeStreamWrongLastSequence), false},
		{"held", live, &fence.HeldError{Key: "k"}, false},
	} {
		if got := unavailable(c.ctx, c.err); got != c.want {
			t.Errorf("%s: unavailable(%v) = %v; want %v", c.name, c.err, got, c.want)
		}
	}
}
