package fencek8s

import (
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

// unavailable reports whether err, from the API server or on the way to
// it, says the server or its storage (etcd) could not answer for now: an
// acquisition's error that matches fence.ErrUnavailable (unavail.Mark),
// besides the network errors every client shares (client-go wraps those
// in *url.Error, which unwraps). A 409 Conflict is not one: someone else
// wrote the Lease, which TryAcquire reports as held. The status checks are
// those of k8s.io/apimachinery/pkg/api/errors; what the server sends for
// a storage fault is in k8s.io/apiserver/pkg/storage/errors (Interpret*).
func unavailable(err error) bool {
	switch {
	case apierrors.IsServerTimeout(err):
		// 500 ServerTimeout: the storage was unreachable (Interpret*Error)
		// or the server asks to retry after RetryAfterSeconds.
		return true
	case apierrors.IsTimeout(err):
		// 504 Timeout: the request did not complete within the server's
		// timeout (a slow or stuck storage).
		return true
	case apierrors.IsTooManyRequests(err):
		// 429: API Priority and Fairness or max-in-flight turned the
		// request away: the server is overloaded. client-go has already
		// retried it after the Retry-After it was given.
		return true
	case apierrors.IsServiceUnavailable(err):
		// 503: the server (or a proxy before it) is not serving yet, or
		// is shutting down.
		return true
	case apierrors.IsInternalError(err):
		// 500 with an etcd error the server passed on as is (reason
		// Unknown): etcd without a leader, stopped, or timing out. Other
		// internal errors (a corrupt object, a failing webhook) stay.
		return etcdUnavailable(err.Error())
	}
	// The HTTP/2 connection to the server broke, or the server closed it
	// going down (GOAWAY): client-go's own names for these. Or client-go's
	// own rate limit (rest.Config's QPS and Burst) would hold the request
	// past the attempt's deadline, so it was never sent: the store could
	// not be asked in time, as under a server's 429, and a waiting Acquire
	// tries again within its wait rather than failing before it ends
	// (client-go's rest.Request.tryThrottle; the limiter's own message is
	// golang.org/x/time/rate's).
	msg := err.Error()
	return utilnet.IsHTTP2ConnectionLost(err) ||
		strings.Contains(msg, "http2: server sent GOAWAY and closed the connection") ||
		strings.Contains(msg, "client rate limiter Wait returned an error: rate: Wait(n=")
}

// etcdUnavailable reports whether msg carries one of the errors of etcd's
// client (go.etcd.io/etcd/api/v3/v3rpc/rpctypes: gRPC code Unavailable
// there, but "too many requests", ResourceExhausted) that say etcd could
// not answer for now, or any other gRPC Unavailable.
func etcdUnavailable(msg string) bool {
	for _, s := range []string{
		"etcdserver: no leader",
		"etcdserver: leader changed",
		"etcdserver: server stopped",
		"etcdserver: request timed out", // and its variants: "..., possibly due to ..."
		"etcdserver: unhealthy cluster",
		"etcdserver: too many requests",
		"code = Unavailable",
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
