package fenceaztable

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/fencing/fence"
)

// storageError is an error from the service or the transport, in one line:
// the operation, then the HTTP status and the service's error code, or the
// transport's error without its URL (a SAS token's signature is in it). It
// unwraps to the SDK's error, for errors.As with *azcore.ResponseError.
type storageError struct {
	op  string
	err error
}

func storageErr(op string, err error) error { return &storageError{op: op, err: err} }

func (e *storageError) Error() string {
	var detail string
	var re *azcore.ResponseError
	var ue *url.Error
	switch {
	case errors.As(e.err, &re):
		code := re.ErrorCode
		if code == "" {
			code = http.StatusText(re.StatusCode)
		}
		detail = fmt.Sprintf("%d %s", re.StatusCode, code)
	case errors.As(e.err, &ue):
		detail = ue.Op + ": " + ue.Err.Error()
	default:
		detail = e.err.Error()
	}
	if e.op == "" {
		return detail
	}
	return e.op + ": " + detail
}

func (e *storageError) Unwrap() error { return e.err }

// statusOf returns the HTTP status of a service error; 0 for others.
func statusOf(err error) int {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.StatusCode
	}
	return 0
}

// codeOf returns the service's error code; "" for other errors.
func codeOf(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return re.ErrorCode
	}
	return ""
}

// refused reports whether the service answered a request with a client
// error, so that it changed nothing.
func refused(err error) bool {
	st := statusOf(err)
	return st >= 400 && st < 500 && st != http.StatusRequestTimeout && st != http.StatusTooManyRequests
}

// conflict reports whether a conditional write was refused because the
// entity is not as the writer read it: changed (412), gone (404) or
// already there (409, for an insert).
func conflict(err error) bool {
	switch statusOf(err) {
	case http.StatusPreconditionFailed, http.StatusNotFound, http.StatusConflict:
		return true
	}
	return false
}

// notHeldErr wraps a conditional write's refusal as fence.ErrNotHeld.
func notHeldErr(op string, err error) error {
	return fmt.Errorf("%s: %w (%w)", op, fence.ErrNotHeld, storageErr("", err))
}
