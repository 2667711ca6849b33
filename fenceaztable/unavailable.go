package fenceaztable

import (
	"net/http"

	"github.com/fencing/fence/internal/azkit"
)

// unavailable reports whether err is the service's answer that it could
// not serve the request for now: an acquisition's error that matches
// fence.ErrUnavailable (unavail.Mark), besides the network errors every
// client shares (the SDK returns the transport's error as it is, once its
// retries are spent). These are the statuses azcore's retry policy
// retries (azcore/policy.RetryOptions.StatusCodes), and so the ones it
// returns in an *azcore.ResponseError once its retries are spent.
func unavailable(err error) bool {
	switch azkit.Status(err) {
	case http.StatusRequestTimeout, // 408: the request took too long to arrive
		http.StatusTooManyRequests,     // 429: throttled
		http.StatusInternalServerError, // 500: InternalError, OperationTimedOut
		http.StatusBadGateway,          // 502
		http.StatusServiceUnavailable,  // 503: ServerBusy
		http.StatusGatewayTimeout:      // 504
		return true
	}
	return false
}
