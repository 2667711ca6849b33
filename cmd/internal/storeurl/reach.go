package storeurl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
)

// refused dials every host and returns their errors if each one refused
// the connection, had no route or no address: nothing listens there. It
// returns nil as soon as a host accepts, or if one does not answer within
// a few seconds (it may be slow, or behind a firewall that drops packets:
// the store's calls then time out as before). what names a host in the
// error: "no <what> reachable: ...".
//
// Openers call it where their client library would wait out the context
// on a closed port, or would say only that no server answered.
func refused(ctx context.Context, what string, hosts []string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel() // stops the dials still running
	results := make(chan error, len(hosts))
	for _, h := range hosts {
		go func() {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", h)
			if err == nil {
				c.Close()
			}
			results <- err
		}()
	}
	var errs []any
	for range hosts {
		err := <-results
		var ne net.Error
		if err == nil || errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
			return nil
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("no "+what+" reachable: "+strings.Repeat("; %w", len(errs))[2:], errs...)
}
