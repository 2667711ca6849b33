package fencenats

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/unavail"
)

// errNoReply is the cause of an acquisition's or a release's own
// deadline: no reply within the lease's TTL, after which a reply could
// grant nothing, and the key frees itself.
var errNoReply = errors.New("fencenats: no reply within the lease's TTL")

// acquisition runs acquire, an acquisition entry point, and marks its
// error with fence.ErrUnavailable where NATS could not answer for now
// (unavailable), so that a waiting Acquire waits through it. An error
// once the caller's ctx has ended stays as it is.
//
// While the connection is reconnecting it fails at once instead of
// leaving its requests in nats.go's reconnect buffer, where they would
// wait for the caller's deadline and could land long after their
// attempt was given up. A request lost with its connection (nats.go
// keeps waiting for its reply across the reconnect) is given up after the
// lease's TTL (at least a second, the store's granularity): a later reply
// could grant nothing.
func (d *Store) acquisition(ctx context.Context, req fence.Request, acquire func(context.Context) (fence.Claim, error)) (c fence.Claim, err error) {
	rctx, cancel := context.WithTimeoutCause(ctx, max(req.TTL, time.Second), errNoReply)
	defer cancel()
	if d.js.Conn().IsReconnecting() {
		err = fmt.Errorf("fencenats: %q: %w", req.Key, nats.ErrConnectionReconnecting)
	} else {
		c, err = acquire(rctx)
	}
	if err != nil && ctx.Err() == nil {
		err = d.recreate(ctx, max(req.TTL, time.Second), err)
		err = unavail.Mark(err, func(err error) bool { return unavailable(rctx, err) })
	}
	return c, err
}

// recreate makes the bucket's stream again if err, an acquisition's,
// found no stream to answer and the stream is gone: deleted behind the
// driver's back, or held in memory by a server that restarted. The leases
// it held are lost (their holders' next renewal is refused); the new
// stream's sequence starts at the current time, so its tokens are above
// every earlier one (createStream). Without it a running driver would
// take the missing stream for one electing its leader and wait for ever.
// It returns err, saying what it did; the caller's next attempt (a
// waiting Acquire's) meets the new stream. Each request waits at most
// within, as an acquisition's: a stream electing its leader does not
// answer either.
func (d *Store) recreate(ctx context.Context, within time.Duration, err error) error {
	if !errors.Is(err, jetstream.ErrNoStreamResponse) && !errors.Is(err, nats.ErrNoResponders) {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	_, serr := d.js.Stream(ctx, d.cfg.Name)
	if !errors.Is(serr, jetstream.ErrStreamNotFound) {
		return err // there, or the server cannot tell for now
	}
	if cerr := createStream(ctx, d.js, d.cfg); cerr != nil {
		return fmt.Errorf("%w (the bucket's stream %s is gone, and making it again failed: %w)", err, d.cfg.Name, cerr)
	}
	return fmt.Errorf("%w (the bucket's stream %s was gone: made again, its sequence from the clock)", err, d.cfg.Name)
}

// JetStream API error codes that say the stream cannot answer for now, as
// nats-server defines them (server/errors.json, v2.15); jetstream names
// none of them.
const (
	jsClusterNotAvail          jetstream.ErrorCode = 10008 // JSClusterNotAvailErr, 503: "JetStream system temporarily unavailable" (no meta leader)
	jsClusterNotLeader         jetstream.ErrorCode = 10009 // JSClusterNotLeaderErr: a stream replica that is no longer its leader
	jsStreamOffline            jetstream.ErrorCode = 10118 // JSStreamOfflineErr: the stream's peers are all offline
	jsLastSeqPerSubjectNotDone jetstream.ErrorCode = 10163 // JSStreamExpectedLastSeqPerSubjectNotReady, 503: "temporarily unavailable"
)

// unavailable reports whether err, an acquisition's under rctx, says the
// NATS server or the bucket's stream could not answer for now, beyond the
// connection errors unavail.Network knows. The values are nats.go's
// (v1.55: nats.go, jetstream/errors.go, jetstream/publish.go).
func unavailable(rctx context.Context, err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		// The acquisition's own deadline (acquisition), not the caller's:
		// no reply within a TTL, as from a request lost with its
		// connection or sent to a stream electing its leader.
		return context.Cause(rctx) == errNoReply
	}
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jsClusterNotAvail, jsClusterNotLeader, jsStreamOffline, jsLastSeqPerSubjectNotDone:
			return true
		}
	}
	return errors.Is(err, jetstream.ErrNoStreamResponse) || // a publish met no responders, retried: the stream has no leader, or the server is starting
		errors.Is(err, nats.ErrNoResponders) || // likewise, for a direct get of the key's last message
		errors.Is(err, nats.ErrConnectionReconnecting) || // the connection is down and nats.go reconnects it (acquisition)
		errors.Is(err, nats.ErrReconnectBufExceeded) || // likewise, met by a publish: the reconnect buffer is full, or off (ReconnectBufSize(-1))
		errors.Is(err, nats.ErrDisconnected) || // the request was dropped with its connection for a reconnect (Conn.ForceReconnect)
		errors.Is(err, nats.ErrTimeout) // no reply within a request's own timeout (nats.go's calls without a context)
}
