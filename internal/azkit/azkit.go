// Package azkit holds what the two Azure Storage drivers, fenceazblob and
// fenceaztable, both need from the SDK's errors: one line per failure
// that never prints a URL (a SAS token's signature is in it), and the
// tests on HTTP statuses that decide between "held", "not held" and
// "the service may have done it".
//
// It is a module of its own, beside the core, so that the core never
// depends on the Azure SDK; it is required by the Azure store modules
// only, and is no API: its import path is internal.
package azkit

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/fencing/fence"
)

// Error is an error from the service or the transport, in one line: the
// operation, then the HTTP status and the service's error code, or the
// transport's error without its URL. It unwraps to the SDK's error, for
// errors.As with *azcore.ResponseError.
type Error struct {
	Op  string
	Err error
}

// Err wraps err from the operation op (which may be empty) as an *Error.
func Err(op string, err error) error { return &Error{Op: op, Err: err} }

func (e *Error) Error() string {
	var detail string
	var re *azcore.ResponseError
	var ue *url.Error
	switch {
	case errors.As(e.Err, &re):
		code := re.ErrorCode
		if code == "" {
			code = http.StatusText(re.StatusCode)
		}
		detail = fmt.Sprintf("%d %s", re.StatusCode, code)
	case errors.As(e.Err, &ue):
		detail = ue.Op + ": " + ue.Err.Error()
	default:
		detail = e.Err.Error()
	}
	if e.Op == "" {
		return detail
	}
	return e.Op + ": " + detail
}

func (e *Error) Unwrap() error { return e.Err }

// Status returns the HTTP status of a service error; 0 for others.
func Status(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

// Code returns the service's error code; "" for other errors.
func Code(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.ErrorCode
	}
	return ""
}

// Refused reports whether the service answered a request with a client
// error, so that it changed nothing. A timeout (408) and throttling (429)
// are not refusals: the request may still land.
func Refused(err error) bool {
	st := Status(err)
	return st >= 400 && st < 500 && st != http.StatusRequestTimeout && st != http.StatusTooManyRequests
}

// Conflict reports whether a conditional request was refused because the
// resource is not as the writer read it: changed or another's (412, 409)
// or gone (404).
func Conflict(err error) bool {
	switch Status(err) {
	case http.StatusPreconditionFailed, http.StatusNotFound, http.StatusConflict:
		return true
	}
	return false
}

// NotHeld wraps the refusal err of the operation op as fence.ErrNotHeld,
// keeping the service's answer in the message and the chain.
func NotHeld(op string, err error) error {
	return fmt.Errorf("%s: %w (%w)", op, fence.ErrNotHeld, Err("", err))
}

// Unavailable reports whether err is the service's answer that it could
// not serve the request for now: an acquisition's error that matches
// fence.ErrUnavailable (unavail.Mark), besides the network errors every
// client shares (the SDK returns the transport's error as it is, once its
// retries are spent). These are the statuses azcore's retry policy
// retries (azcore/policy.RetryOptions.StatusCodes), and so the ones it
// returns in an *azcore.ResponseError once its retries are spent.
func Unavailable(err error) bool {
	switch Status(err) {
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
