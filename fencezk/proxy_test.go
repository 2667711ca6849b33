package fencezk_test

import (
	"encoding/binary"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// proxy is a TCP proxy between ZooKeeper clients and a server, to cut
// connections (a blip) or refuse them for a while (a partition).
type proxy struct {
	ln       net.Listener
	upstream string

	mu     sync.Mutex
	conns  map[net.Conn]bool
	refuse bool
	wg     sync.WaitGroup
}

func newProxy(t *testing.T, upstream string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, upstream: upstream, conns: make(map[net.Conn]bool)}
	p.wg.Go(p.serve)
	t.Cleanup(func() {
		ln.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

func (p *proxy) Addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refuse := p.refuse
		p.mu.Unlock()
		if refuse {
			c.Close()
			continue
		}
		u, err := net.Dial("tcp", p.upstream)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[u] = true, true
		p.mu.Unlock()
		pipe := func(dst, src net.Conn) {
			_, _ = io.Copy(dst, src)
			dst.Close()
			src.Close()
		}
		p.wg.Go(func() { pipe(u, c) })
		p.wg.Go(func() { pipe(c, u) })
	}
}

// Cut closes every connection through the proxy, on both sides.
func (p *proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// Partition cuts every connection and refuses new ones for d: the server
// sees its client gone, the client cannot reach the server.
func (p *proxy) Partition(d time.Duration) {
	p.mu.Lock()
	p.refuse = true
	p.mu.Unlock()
	p.Cut()
	time.Sleep(d)
	p.mu.Lock()
	p.refuse = false
	p.mu.Unlock()
}

// requestCounter is a net.Conn that records the opcodes of the ZooKeeper
// requests written through it (not the connect handshake, nor pings).
type requestCounter struct {
	net.Conn
	mu    *sync.Mutex
	ops   *[]int32
	buf   []byte
	first bool // the connect request is still to come
}

func (r *requestCounter) Write(b []byte) (int, error) {
	r.mu.Lock()
	r.buf = append(r.buf, b...)
	for len(r.buf) >= 4 {
		size := int(binary.BigEndian.Uint32(r.buf))
		if len(r.buf) < 4+size {
			break
		}
		frame := r.buf[4 : 4+size]
		r.buf = r.buf[4+size:]
		if r.first {
			r.first = false
			continue
		}
		const opPing, opSetWatches = 11, 101
		if len(frame) >= 8 {
			if op := int32(binary.BigEndian.Uint32(frame[4:8])); op != opPing && op != opSetWatches {
				*r.ops = append(*r.ops, op)
			}
		}
	}
	r.mu.Unlock()
	return r.Conn.Write(b)
}
