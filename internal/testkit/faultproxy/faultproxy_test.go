package faultproxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testkit/leakcheck"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// echoServer answers every line with the same line, and counts the bytes it
// received.
type echoServer struct {
	ln   net.Listener
	got  chan string // each line received
	done chan struct{}
}

func startEcho(t *testing.T) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &echoServer{ln: ln, got: make(chan string, 1000), done: make(chan struct{})}
	go func() {
		defer close(e.done)
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			go func() {
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					e.got <- line
					if _, err := io.WriteString(c, line); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-e.done
	})
	return e
}

func startProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := New(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return p
}

type client struct {
	t    *testing.T
	conn net.Conn
	r    *bufio.Reader
}

func dial(t *testing.T, p *Proxy) *client {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{t: t, conn: c, r: bufio.NewReader(c)}
}

func (c *client) send(line string) {
	c.t.Helper()
	if _, err := io.WriteString(c.conn, line+"\n"); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// recv reads one line within d; ok is false on timeout.
func (c *client) recv(d time.Duration) (string, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(d))
	line, err := c.r.ReadString('\n')
	return strings.TrimSuffix(line, "\n"), err
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestPass(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	big := strings.Repeat("x", 3*chunkSize) // more than one chunk
	for _, msg := range []string{"hello", big, "bye"} {
		c.send(msg)
		got, err := c.recv(5 * time.Second)
		if err != nil || got != msg {
			t.Fatalf("echo of %d bytes: got %d bytes, %v", len(msg), len(got), err)
		}
	}
	if n := p.Conns(); n != 1 {
		t.Errorf("Conns = %d, want 1", n)
	}
}

func TestBlackholeHoldsBytesUntilHeal(t *testing.T) {
	for _, dir := range []Direction{Upstream, Downstream, Both} {
		t.Run(dir.String(), func(t *testing.T) {
			e := startEcho(t)
			p := startProxy(t, e.ln.Addr().String())
			p.Blackhole(dir)
			c := dial(t, p) // accepted, though nothing passes
			c.send("one")
			c.send("two")
			if _, err := c.recv(300 * time.Millisecond); !isTimeout(err) {
				t.Fatalf("read through a %v blackhole: %v, want a timeout", dir, err)
			}
			select {
			case line := <-e.got:
				if dir&Upstream != 0 {
					t.Fatalf("server received %q through an upstream blackhole", line)
				}
			case <-time.After(100 * time.Millisecond):
				if dir&Upstream == 0 {
					t.Fatal("server received nothing with only the downstream blackholed")
				}
			}
			p.Heal()
			for _, want := range []string{"one", "two"} {
				got, err := c.recv(5 * time.Second)
				if err != nil || got != want {
					t.Fatalf("after Heal: got %q, %v; want %q (held bytes delivered in order)", got, err, want)
				}
			}
		})
	}
}

func TestBlackholeDeliversAfterClientClosed(t *testing.T) {
	// A request sent into a partition by a client that then gives up still
	// reaches the server when the partition heals, as with TCP.
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	p.Blackhole(Both)
	c := dial(t, p)
	c.send("late")
	time.Sleep(50 * time.Millisecond)
	c.conn.Close()
	time.Sleep(50 * time.Millisecond)
	select {
	case line := <-e.got:
		t.Fatalf("server received %q during the blackhole", line)
	default:
	}
	p.Heal()
	select {
	case line := <-e.got:
		if line != "late\n" {
			t.Fatalf("server received %q", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("held request not delivered after Heal")
	}
}

func TestDelay(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	const d = 100 * time.Millisecond
	p.Delay(d, 0)
	start := time.Now()
	c.send("slow")
	if got, err := c.recv(5 * time.Second); err != nil || got != "slow" {
		t.Fatalf("got %q, %v", got, err)
	}
	if took := time.Since(start); took < 2*d {
		t.Errorf("round trip took %v with %v each way; want at least %v", took, d, 2*d)
	}

	// Jitter: every round trip within 2*(d±j), order kept.
	const j = 40 * time.Millisecond
	p.Delay(d, j)
	start = time.Now()
	const n = 20
	for i := range n {
		c.send(fmt.Sprint(i))
		time.Sleep(2 * time.Millisecond)
	}
	for i := range n {
		got, err := c.recv(5 * time.Second)
		if err != nil || got != fmt.Sprint(i) {
			t.Fatalf("line %d: got %q, %v (order must be kept under jitter)", i, got, err)
		}
	}
	if took := time.Since(start); took < 2*(d-j) {
		t.Errorf("jittered round trips took %v; want at least %v", took, 2*(d-j))
	}

	p.Heal()
	start = time.Now()
	c.send("fast")
	if got, err := c.recv(5 * time.Second); err != nil || got != "fast" {
		t.Fatalf("got %q, %v", got, err)
	}
	if took := time.Since(start); took >= d {
		t.Errorf("round trip after Heal took %v; want well under %v", took, d)
	}
}

func TestHealDeliversDelayedBytesAtOnce(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	p.Delay(time.Hour, 0)
	c.send("held")
	time.Sleep(50 * time.Millisecond)
	p.Heal()
	if got, err := c.recv(5 * time.Second); err != nil || got != "held" {
		t.Fatalf("got %q, %v; want the delayed line delivered by Heal", got, err)
	}
}

func TestReset(t *testing.T) {
	e := startEcho(t)
	p := startProxy(t, e.ln.Addr().String())
	c := dial(t, p)
	c.send("a")
	if _, err := c.recv(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	p.Blackhole(Both) // bytes held at the moment of the reset are discarded
	c.send("b")
	time.Sleep(20 * time.Millisecond)
	p.Reset()
	_, err := c.recv(5 * time.Second)
	if err == nil || isTimeout(err) {
		t.Fatalf("read after Reset: %v; want the connection closed", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for p.Conns() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := p.Conns(); n != 0 {
		t.Fatalf("Conns = %d after Reset", n)
	}

	// New connections work (once healed).
	p.Heal()
	c2 := dial(t, p)
	c2.send("again")
	if got, err := c2.recv(5 * time.Second); err != nil || got != "again" {
		t.Fatalf("after Reset: got %q, %v", got, err)
	}
	select {
	case line := <-e.got:
		if line != "a\n" {
			t.Fatalf("server first received %q", line)
		}
	default:
	}
	for len(e.got) > 0 {
		if line := <-e.got; line == "b\n" {
			t.Fatal("bytes held at the reset were delivered")
		}
	}
}

func TestTargetDown(t *testing.T) {
	// A port closed and left free may be taken by another test binary's
	// server before the proxy dials it (seen in CI).
	p := startProxy(t, testserver.ClosedAddr(t))
	conn, err := net.DialTimeout("tcp", p.Addr(), time.Second)
	if err != nil {
		return // reset before the client saw it established: also a refusal
	}
	defer conn.Close()
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("read through a proxy whose target is down: %v; want the connection closed", err)
	}
}

func TestCloseEndsConnections(t *testing.T) {
	e := startEcho(t)
	p, err := New(e.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	c := dial(t, p)
	p.Blackhole(Both)
	c.send("x")
	done := make(chan error, 1)
	go func() { done <- p.Close() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close hung with a connection open")
	}
	if _, err := c.recv(5 * time.Second); err == nil || isTimeout(err) {
		t.Fatalf("read after Close: %v; want the connection closed", err)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Error("proxy still accepts after Close")
	}
}
