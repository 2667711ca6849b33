// Package faultproxy is a TCP proxy that injects network faults between a
// client and a server, switched at run time: pass, delay (fixed or
// jittered), blackhole (connections are accepted and bytes read, but
// nothing is delivered, in one direction or both), reset of every open
// connection, and heal. Tests and the torture tool put one in front of a
// store, point a client at Addr, and break the network under it.
//
// A blackhole holds bytes rather than dropping them, and Heal delivers
// them in order: that is what a partition does to a TCP connection that
// outlives it (the sender retransmits until the path is back). Dropping
// them would corrupt the byte stream, which no network does to TCP, and
// would test the client's protocol parser instead of its handling of a
// partition. A connection reset is the other way a partition ends; Reset
// does that.
//
// Why not a library. The project's rule is to prefer a well-kept one; two
// were evaluated:
//   - go.etcd.io/etcd/pkg/v3/proxy (v3.7.3) is light (zap, go-humanize,
//     etcd's client/pkg) but does not fit: it cannot reset the connections
//     it carries (ResetListener only reopens the listener); its jitter is
//     drawn once when the delay is set, not per packet; its blackhole
//     discards bytes, so the stream is corrupt after heal; it listens on
//     every interface and, started on port 0, cannot tell which port it
//     got; and Close waits for connections it never closes.
//   - toxiproxy's server package: only v2.5.0 (2022) is served to this
//     project, and embedding it puts the Prometheus client, zerolog,
//     gorilla/mux and protobuf into the root module's go.sum for every user
//     of fence, for a test tool. Its timeout toxic also drops data.
//
// So this package is small and does only the above.
package faultproxy

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"
)

// Direction selects which way bytes flow.
type Direction uint8

// The directions. Upstream is client to server (requests), Downstream is
// server to client (replies).
const (
	Upstream Direction = 1 << iota
	Downstream
	Both = Upstream | Downstream
)

func (d Direction) String() string {
	switch d {
	case 0:
		return "none"
	case Upstream:
		return "upstream"
	case Downstream:
		return "downstream"
	case Both:
		return "both"
	}
	return fmt.Sprintf("Direction(%d)", uint8(d))
}

// DialTimeout bounds the proxy's connection to the target.
const DialTimeout = 5 * time.Second

// chunkSize is the most bytes one read moves; queueLen how many chunks a
// direction holds before the proxy stops reading (so a blackhole holds at
// most queueLen*chunkSize bytes per direction of a connection, and then
// the sender's own buffers fill, as with a real partition).
const (
	chunkSize = 32 << 10
	queueLen  = 64
)

// Proxy forwards TCP connections from Addr to a target address, with the
// faults currently switched on. Its methods are safe for concurrent use.
type Proxy struct {
	ln     net.Listener
	target string

	mu        sync.Mutex
	delay     time.Duration
	jitter    time.Duration
	blackhole Direction
	gen       uint64        // bumped by Heal: bytes read before it wait no longer
	changed   chan struct{} // closed and replaced whenever the faults change
	links     map[*link]struct{}
	closed    bool

	wg sync.WaitGroup
}

// New starts a proxy on a free port of 127.0.0.1 that forwards to target
// ("host:port"). It passes everything until told otherwise.
func New(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: %w", err)
	}
	p := &Proxy{ln: ln, target: target, changed: make(chan struct{}), links: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the address clients connect to, "127.0.0.1:port".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Delay holds every chunk of bytes read from now on, in both directions,
// for d plus a uniformly random amount in [-jitter, +jitter] (never less
// than zero) before delivering it. Order is kept: a chunk is never
// delivered before one read earlier on the same connection and direction.
// Delay(0, 0) stops delaying new bytes.
func (p *Proxy) Delay(d, jitter time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay, p.jitter = max(d, 0), max(jitter, 0)
	p.changedLocked()
}

// Blackhole stops delivering bytes in dir (Upstream, Downstream or Both).
// Connections are still accepted and bytes still read; they are held until
// Heal (or Blackhole with a direction that no longer includes theirs), and
// then delivered in order.
func (p *Proxy) Blackhole(dir Direction) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.blackhole = dir & Both
	p.changedLocked()
}

// Heal switches every fault off: bytes held by a blackhole or a delay are
// delivered at once, in order, and new bytes pass undelayed.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.delay, p.jitter, p.blackhole = 0, 0, 0
	p.gen++
	p.changedLocked()
}

// Reset closes every connection the proxy carries now, on both sides, with
// a TCP reset (RST), and discards the bytes it holds for them. New
// connections are accepted as before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.reset()
	}
}

// Conns returns the number of connections the proxy carries now.
func (p *Proxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Close stops listening, resets every connection and waits until the
// proxy's goroutines have ended.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.Reset()
	p.wg.Wait()
	return err
}

func (p *Proxy) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// state is what a pipe needs to know to deliver a chunk.
func (p *Proxy) state() (hole Direction, gen uint64, changed <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.blackhole, p.gen, p.changed
}

// stamp returns when a chunk read now is due, and the heal generation.
func (p *Proxy) stamp() (time.Time, uint64) {
	p.mu.Lock()
	d, j, gen := p.delay, p.jitter, p.gen
	p.mu.Unlock()
	if j > 0 {
		d += time.Duration(rand.Int64N(int64(2*j)+1)) - j
	}
	return time.Now().Add(max(d, 0)), gen
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: try again
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

// link is one proxied connection: the client's and the proxy's own to the
// target.
type link struct {
	client, server net.Conn
	once           sync.Once
	done           chan struct{} // closed once both sides are closed
}

// reset closes both sides with RST.
func (l *link) reset() {
	l.once.Do(func() {
		for _, c := range []net.Conn{l.client, l.server} {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0)
			}
			_ = c.Close()
		}
		close(l.done)
	})
}

// close closes both sides normally.
func (l *link) close() {
	l.once.Do(func() {
		_ = l.client.Close()
		_ = l.server.Close()
		close(l.done)
	})
}

func (p *Proxy) serve(c net.Conn) {
	defer p.wg.Done()
	s, err := net.DialTimeout("tcp", p.target, DialTimeout)
	if err != nil {
		// The target is down: the client sees its connection end at once,
		// as it would see a refused connection without the proxy.
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		_ = c.Close()
		return
	}
	l := &link{client: c, server: s, done: make(chan struct{})}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		l.reset()
		return
	}
	p.links[l] = struct{}{}
	p.mu.Unlock()

	var pipes sync.WaitGroup
	pipes.Go(func() { p.pipe(l, c, s, Upstream) })
	pipes.Go(func() { p.pipe(l, s, c, Downstream) })
	pipes.Wait()
	l.close()
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

type chunk struct {
	data []byte
	due  time.Time
	gen  uint64
}

// pipe copies src to dst in direction dir, applying the faults. When src
// ends it delivers what it holds, then half-closes dst, as TCP would
// deliver a FIN after the data before it.
func (p *Proxy) pipe(l *link, src, dst net.Conn, dir Direction) {
	queue := make(chan chunk, queueLen)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.deliver(l, dst, dir, queue)
	}()
	var last time.Time
	for {
		buf := make([]byte, chunkSize)
		n, err := src.Read(buf)
		if n > 0 {
			due, gen := p.stamp()
			if due.Before(last) {
				due = last // keep order under jitter
			}
			last = due
			select {
			case queue <- chunk{data: buf[:n], due: due, gen: gen}:
			case <-done: // delivery failed: the link is going down
			}
		}
		if err != nil {
			break
		}
	}
	close(queue)
	<-done
}

// deliver writes queued chunks to dst when they are due and their
// direction is not blackholed.
func (p *Proxy) deliver(l *link, dst net.Conn, dir Direction, queue <-chan chunk) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for c := range queue {
		for {
			hole, gen, changed := p.state()
			wait := time.Duration(0)
			if c.gen == gen {
				wait = time.Until(c.due)
			}
			if hole&dir == 0 && wait <= 0 {
				break
			}
			var tick <-chan time.Time
			if hole&dir == 0 {
				timer.Reset(wait)
				tick = timer.C
			}
			select {
			case <-changed:
			case <-tick:
			case <-l.done:
				for range queue {
				}
				return
			}
			timer.Stop()
		}
		if _, err := dst.Write(c.data); err != nil {
			l.reset() // the other side is gone: so is the connection
			for range queue {
			}
			return
		}
	}
	if tc, ok := dst.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

var _ io.Closer = (*Proxy)(nil)
