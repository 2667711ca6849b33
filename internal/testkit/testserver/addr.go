package testserver

import (
	"errors"
	"net"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Addresses for tests of how a client meets a store that is down or hung.

// ClosedAddr returns a loopback address (host:port) where nothing listens:
// a connection to it is refused at once, as by a store that is down. The
// port comes from below the kernel's ephemeral range, like the servers'
// (see Ports), so no outgoing connection takes it, and no server of this
// test binary is started on it; a socket bound to it, never listening,
// keeps it from any other until the test ends. Each call returns another
// port.
func ClosedAddr(tb testing.TB) string {
	tb.Helper()
	for range 10 {
		port, err := freePort(0)
		if err != nil {
			tb.Fatalf("testserver: %v", err)
		}
		fd, err := holdPort(port)
		if err != nil {
			continue // taken by another test binary's server since: next
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			c.Close()
			syscall.Close(fd)
			continue
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			tb.Cleanup(func() { syscall.Close(fd) })
			return addr
		}
		syscall.Close(fd)
	}
	tb.Fatal("testserver: found no loopback port that refuses connections")
	return ""
}

// holdPort binds a TCP socket to port on 127.0.0.1 and never listens on
// it: connections to the port are refused, and no other server can take
// it until the socket is closed (a server of another test binary once
// did, between the choice of a closed port and its use).
func holdPort(port int) (int, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// SilentAddr returns the address of a loopback listener that never
// accepts: the kernel completes every handshake and nothing ever answers,
// as with a hung store or a middlebox that swallows traffic. It is closed
// when the test ends.
func SilentAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("testserver: %v", err)
	}
	tb.Cleanup(func() { l.Close() })
	return l.Addr().String()
}
