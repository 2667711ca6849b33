package fencezk

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// refusals is the dialer of a connection that Dial opens: it dials as
// go-zookeeper does and reports, on refused, when every server address
// has failed in a row with an error that is not a timeout (connection
// refused, no route to host): nothing listens there, so waiting for a
// session is pointless. A dial that connects or times out (a host that
// drops packets may still answer later) starts the count again.
type refusals struct {
	hosts   zk.HostProvider // to know how many addresses there are
	refused chan error      // capacity 1
	netDial zk.Dialer       // net.DialTimeout

	mu   sync.Mutex
	errs []error // the failures in a row
}

func newRefusals(hosts zk.HostProvider) *refusals {
	return &refusals{hosts: hosts, refused: make(chan error, 1), netDial: net.DialTimeout}
}

func (r *refusals) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	c, err := r.netDial(network, address, timeout)
	r.mu.Lock()
	defer r.mu.Unlock()
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		r.errs = nil
		return c, err
	}
	r.errs = append(r.errs, err)
	if len(r.errs) >= r.hosts.Len() {
		select {
		case r.refused <- joinErrors(r.errs):
		default:
		}
		r.errs = nil
	}
	return c, err
}

// joinErrors wraps errs in one error whose message is theirs on one line.
func joinErrors(errs []error) error {
	args := make([]any, len(errs))
	for i, err := range errs {
		args[i] = err
	}
	return fmt.Errorf(strings.Repeat("; %w", len(errs))[2:], args...)
}
