package fencezk

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// fixedHosts is a zk.HostProvider of n addresses.
type fixedHosts int

func (n fixedHosts) Init([]string) error  { return nil }
func (n fixedHosts) Len() int             { return int(n) }
func (n fixedHosts) Next() (string, bool) { return "", false }
func (n fixedHosts) Connected()           {}

var (
	refused  = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	timedOut = &net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}
)

// TestRefusalsCountEveryAddress: Dial gives up only once every address
// has refused in a row; a connection or a timeout in between starts the
// count again, since that server may yet answer.
func TestRefusalsCountEveryAddress(t *testing.T) {
	for _, tc := range []struct {
		name    string
		results []error // one dial each; nil: connected
		refused bool
	}{
		{"all refuse", []error{refused, refused, refused}, true},
		{"two of three refuse", []error{refused, refused}, false},
		{"a timeout in between", []error{refused, timedOut, refused, refused}, false},
		{"a connection in between", []error{refused, nil, refused, refused}, false},
		{"all refuse after a timeout", []error{timedOut, refused, refused, refused}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRefusals(fixedHosts(3))
			next := 0
			r.netDial = func(string, string, time.Duration) (net.Conn, error) {
				err := tc.results[next]
				next++
				return nil, err
			}
			for range tc.results {
				_, _ = r.dial("tcp", "x", time.Second)
			}
			select {
			case err := <-r.refused:
				if !tc.refused {
					t.Errorf("reported %v; want no report", err)
				} else if !errors.Is(err, syscall.ECONNREFUSED) {
					t.Errorf("reported %v; want errors matching ECONNREFUSED", err)
				}
			default:
				if tc.refused {
					t.Error("no report; want every address's refusal")
				}
			}
		})
	}
}
