package fenceredis

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Waiting. A release publishes on the key's release channel (scripts.go);
// waiters subscribe to it. A Store multiplexes every waiter on every key
// over one subscription connection, or, on a Cluster with sharded pub/sub,
// one per master (a shard channel can only be subscribed to at the master
// that owns its slot). Each channel is subscribed to once, however many
// wait on it, and unsubscribed when the last waiter is gone; an idle
// connection is closed.
//
// Which pub/sub: sharded (SSUBSCRIBE/SPUBLISH) on Redis 7 and later,
// plain (SUBSCRIBE/PUBLISH) before. The release script chooses by the
// version of the server it runs on, the waiters by the version of the
// server they first ask, so a deployment whose servers straddle 7.0 (in a
// rolling upgrade) may miss wake-ups; waiters then still wake at the
// holder's expiry or at the Client's polling bound. Plain pub/sub on a
// Cluster broadcasts every release to every node.
//
// Watch returns only once the server has the subscription: after writing
// SUBSCRIBE it sends a PING with a unique payload on the same connection
// and waits for its PONG (replies come in order), so a release right after
// Watch returns is never missed. After a reconnect (go-redis resubscribes
// by itself) a release may have been missed, so a repeated confirmation of
// a subscription wakes the channel's waiters.

// confirmTimeout bounds how long Watch waits for the server to confirm a
// subscription; the Client polls instead if it fails.
const confirmTimeout = 5 * time.Second

// healthInterval is how long a subscription connection may be silent
// before it is pinged; one more such interval without any reply and it is
// dropped as dead.
const healthInterval = 3 * time.Second

var errHubClosed = errors.New("fenceredis: store closed")

type hub struct {
	rdb   redis.UniversalClient
	pings atomic.Uint64
	wg    sync.WaitGroup // receive loops

	mu      sync.Mutex
	sharded *bool               // nil until known
	conns   map[string]*subConn // by master address; "" for the only one
	closed  bool
}

// subConn is one subscription connection.
type subConn struct {
	h        *hub
	addr     string
	ps       *redis.PubSub
	sharded  bool
	stop     chan struct{} // closed by shutdown
	stopOnce sync.Once

	ops        sync.Mutex      // orders subscribe/unsubscribe writes
	subscribed map[string]bool // what was last asked of the server; guarded by ops

	// guarded by h.mu
	topics    map[string]map[chan struct{}]struct{} // channel -> waiters
	confirmed map[string]bool                       // the server confirmed the subscription
	pongs     map[string]chan struct{}
	closed    bool
}

func newHub(rdb redis.UniversalClient) *hub {
	return &hub{rdb: rdb, conns: make(map[string]*subConn)}
}

// watch registers ch to receive a value whenever channel gets a message,
// until ctx is done.
func (h *hub) watch(ctx context.Context, channel string, ch chan struct{}) error {
	sharded, err := h.isSharded(ctx)
	if err != nil {
		return err
	}
	var node redis.UniversalClient = h.rdb
	addr := ""
	if cc, ok := h.rdb.(*redis.ClusterClient); ok && sharded {
		c, err := cc.MasterForKey(ctx, channel)
		if err != nil {
			return err
		}
		node, addr = c, c.Options().Addr
	}

	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return errHubClosed
	}
	sc := h.conns[addr]
	if sc == nil {
		sc = h.open(node, addr, sharded)
	}
	if sc.topics[channel] == nil {
		sc.topics[channel] = make(map[chan struct{}]struct{})
	}
	sc.topics[channel][ch] = struct{}{}
	h.mu.Unlock()

	stop := context.AfterFunc(ctx, func() { h.unwatch(sc, channel, ch) })
	err = sc.sync(ctx, channel)
	if err == nil {
		err = sc.confirm(ctx)
	}
	if err != nil && stop() {
		h.unwatch(sc, channel, ch)
	}
	return err
}

// isSharded finds out, once, whether the servers have sharded pub/sub.
func (h *hub) isSharded(ctx context.Context) (bool, error) {
	h.mu.Lock()
	known := h.sharded
	h.mu.Unlock()
	if known != nil {
		return *known, nil
	}
	v, err := versionScript.Run(ctx, h.rdb, nil).Int64()
	if err != nil {
		return false, err
	}
	sharded := v > 0 // REDIS_VERSION_NUM exists from 7.0 on
	h.mu.Lock()
	h.sharded = &sharded
	h.mu.Unlock()
	return sharded, nil
}

// open starts a subscription connection. Callers hold h.mu.
func (h *hub) open(node redis.UniversalClient, addr string, sharded bool) *subConn {
	sc := &subConn{
		h:          h,
		addr:       addr,
		sharded:    sharded,
		stop:       make(chan struct{}),
		subscribed: make(map[string]bool),
		topics:     make(map[string]map[chan struct{}]struct{}),
		confirmed:  make(map[string]bool),
		pongs:      make(map[string]chan struct{}),
	}
	if sharded {
		sc.ps = node.SSubscribe(context.Background())
	} else {
		sc.ps = node.Subscribe(context.Background())
	}
	h.conns[addr] = sc
	h.wg.Add(1)
	go sc.receive()
	return sc
}

func (h *hub) unwatch(sc *subConn, channel string, ch chan struct{}) {
	h.mu.Lock()
	if t := sc.topics[channel]; t != nil {
		delete(t, ch)
		if len(t) == 0 {
			delete(sc.topics, channel)
		}
	}
	idle := len(sc.topics) == 0 && !sc.closed
	if idle {
		h.dropLocked(sc)
	}
	h.mu.Unlock()
	if idle {
		sc.close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), confirmTimeout)
	defer cancel()
	_ = sc.sync(ctx, channel) // on failure the channel stays subscribed: harmless
}

// dropLocked takes sc out of service. Callers hold h.mu and then call
// sc.close.
func (h *hub) dropLocked(sc *subConn) {
	sc.closed = true
	if h.conns[sc.addr] == sc {
		delete(h.conns, sc.addr)
	}
}

func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	var all []*subConn
	for _, sc := range h.conns {
		h.dropLocked(sc)
		all = append(all, sc)
	}
	h.mu.Unlock()
	for _, sc := range all {
		sc.close()
	}
	h.wg.Wait()
}

func (sc *subConn) close() {
	sc.stopOnce.Do(func() {
		close(sc.stop)
		_ = sc.ps.Close()
	})
}

// sync brings the server's subscription to channel in line with whether
// anyone waits on it now. Writes happen under sc.ops, each decided from the
// state at that moment, so an UNSUBSCRIBE for a waiter that left can never
// land after the SUBSCRIBE for one that arrived.
func (sc *subConn) sync(ctx context.Context, channel string) error {
	sc.ops.Lock()
	defer sc.ops.Unlock()
	sc.h.mu.Lock()
	want := len(sc.topics[channel]) > 0 && !sc.closed
	sc.h.mu.Unlock()
	if want == sc.subscribed[channel] {
		return nil
	}
	var err error
	switch {
	case want && sc.sharded:
		err = sc.ps.SSubscribe(ctx, channel)
	case want:
		err = sc.ps.Subscribe(ctx, channel)
	case sc.sharded:
		err = sc.ps.SUnsubscribe(ctx, channel)
	default:
		err = sc.ps.Unsubscribe(ctx, channel)
	}
	// go-redis remembers the channel even if the write failed, and
	// subscribes again when it reconnects.
	sc.subscribed[channel] = want
	return err
}

// confirm returns once every subscription written before it is in effect
// on the server.
func (sc *subConn) confirm(ctx context.Context) error {
	id := "fence-" + strconv.FormatUint(sc.h.pings.Add(1), 10)
	pong := make(chan struct{})
	sc.h.mu.Lock()
	sc.pongs[id] = pong
	sc.h.mu.Unlock()
	defer func() {
		sc.h.mu.Lock()
		delete(sc.pongs, id)
		sc.h.mu.Unlock()
	}()
	if err := sc.ps.Ping(ctx, id); err != nil {
		return err
	}
	timer := time.NewTimer(confirmTimeout)
	defer timer.Stop()
	select {
	case <-pong:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-sc.stop:
		return errHubClosed
	case <-timer.C:
		return errors.New("fenceredis: subscription not confirmed within " + confirmTimeout.String())
	}
}

// receive reads the connection until it is closed, and drops it if it
// goes silent.
func (sc *subConn) receive() {
	defer sc.h.wg.Done()
	ctx := context.Background()
	silent, failures := 0, 0
	for {
		select {
		case <-sc.stop:
			return
		default:
		}
		msg, err := sc.ps.ReceiveTimeout(ctx, healthInterval)
		if err == nil {
			silent, failures = 0, 0
			sc.dispatch(msg)
			continue
		}
		var nerr net.Error
		switch {
		case errors.As(err, &nerr) && nerr.Timeout():
			if silent++; silent > 1 {
				sc.fail() // not even our last ping came back
				return
			}
			_ = sc.ps.Ping(ctx)
		case isRedisError(err):
			// An error reply (such as MOVED after a slot migration) for one
			// subscription; the connection is fine.
		default:
			// Broken or unreachable; go-redis reconnects on the next read.
			failures++
			select {
			case <-sc.stop:
				return
			case <-time.After(min(time.Duration(failures)*100*time.Millisecond, time.Second)):
			}
		}
	}
}

// fail takes a dead connection out of service. Its waiters stop getting
// wake-ups and fall back to the Client's polling; later waiters get a new
// connection.
func (sc *subConn) fail() {
	sc.h.mu.Lock()
	sc.h.dropLocked(sc)
	sc.h.mu.Unlock()
	sc.close()
}

func (sc *subConn) dispatch(msg any) {
	sc.h.mu.Lock()
	defer sc.h.mu.Unlock()
	switch m := msg.(type) {
	case *redis.Message:
		sc.wakeLocked(m.Channel)
	case *redis.Subscription:
		switch m.Kind {
		case "subscribe", "ssubscribe":
			if sc.confirmed[m.Channel] {
				// go-redis subscribed again after a reconnect: a release
				// may have gone unseen meanwhile.
				sc.wakeLocked(m.Channel)
			}
			sc.confirmed[m.Channel] = true
		case "unsubscribe", "sunsubscribe":
			delete(sc.confirmed, m.Channel)
		}
	case *redis.Pong:
		if pong := sc.pongs[m.Payload]; pong != nil {
			close(pong)
			delete(sc.pongs, m.Payload)
		}
	}
}

func (sc *subConn) wakeLocked(channel string) {
	for ch := range sc.topics[channel] {
		select {
		case ch <- struct{}{}:
		default: // a wake-up is pending already
		}
	}
}

func isRedisError(err error) bool {
	var rerr redis.Error
	return errors.As(err, &rerr)
}
