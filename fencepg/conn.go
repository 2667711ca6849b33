package fencepg

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// dial opens a new connection with the pool's connection settings, outside
// the pool: for session locks and the LISTEN connection, which must never
// be shared. Context cancellation on it only interrupts the client's read
// (a deadline), never sends the server a cancel request: a cancel request
// can arrive late and cancel the next statement on the connection.
func dial(ctx context.Context, pool *pgxpool.Pool) (*pgx.Conn, error) {
	cfg := pool.Config().ConnConfig.Copy()
	cfg.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	return pgx.ConnectConfig(ctx, cfg)
}

// notifyPayload is the NOTIFY payload announcing key's release: the key
// itself when short, else "sha256:" and its hex digest, since payloads are
// limited to 8000 bytes. A waiter compares payloads, so a spurious match
// only causes an extra attempt.
func notifyPayload(key string) string {
	if len(key) <= 256 {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// listener is a driver's one LISTEN connection, shared by every waiter of
// every key: it fans the release notifications out to the waiters of the
// key named in each payload.
type listener struct {
	pool    *pgxpool.Pool
	channel string

	mu     sync.Mutex
	subs   map[string]map[chan struct{}]struct{}
	stop   context.CancelFunc // nil when not running
	done   chan struct{}      // closed when the running loop has ended
	closed bool
}

func newListener(pool *pgxpool.Pool, channel string) *listener {
	return &listener{pool: pool, channel: channel, subs: make(map[string]map[chan struct{}]struct{})}
}

// watch subscribes to key's releases. It returns once the LISTEN is
// active, so a release after it returns is seen.
func (l *listener) watch(ctx context.Context, key string) (<-chan struct{}, error) {
	payload := notifyPayload(key)
	ch := make(chan struct{}, 1)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, errDriverClosed
	}
	if l.stop == nil {
		if err := l.startLocked(ctx); err != nil {
			return nil, err
		}
	}
	if l.subs[payload] == nil {
		l.subs[payload] = make(map[chan struct{}]struct{})
	}
	l.subs[payload][ch] = struct{}{}
	context.AfterFunc(ctx, func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if set := l.subs[payload]; set != nil {
			delete(set, ch)
			if len(set) == 0 {
				delete(l.subs, payload)
			}
		}
	})
	return ch, nil
}

func (l *listener) startLocked(ctx context.Context) error {
	conn, err := dial(ctx, l.pool)
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{l.channel}.Sanitize()); err != nil {
		_ = conn.Close(context.Background())
		return err
	}
	runCtx, stop := context.WithCancel(context.Background())
	l.stop, l.done = stop, make(chan struct{})
	go l.loop(runCtx, conn, l.done)
	return nil
}

func (l *listener) loop(ctx context.Context, conn *pgx.Conn, done chan struct{}) {
	defer close(done)
	defer conn.Close(context.Background())
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			break
		}
		l.mu.Lock()
		for ch := range l.subs[n.Payload] {
			select {
			case ch <- struct{}{}:
			default: // a wake-up is pending already
			}
		}
		l.mu.Unlock()
	}
	// The connection broke or the driver is closing: close every
	// subscriber's channel, so its waiter falls back to polling, and let
	// the next watch start a new connection.
	l.mu.Lock()
	for payload, set := range l.subs {
		for ch := range set {
			close(ch)
		}
		delete(l.subs, payload)
	}
	if l.done == done {
		l.stop, l.done = nil, nil
	}
	l.mu.Unlock()
}

func (l *listener) close() {
	l.mu.Lock()
	l.closed = true
	stop, done := l.stop, l.done
	l.mu.Unlock()
	if stop != nil {
		stop()
		<-done
	}
}
