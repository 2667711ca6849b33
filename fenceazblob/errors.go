package fenceazblob

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

// notHeld turns the service's refusal of a lease operation into an error
// matching fence.ErrNotHeld: 409 (the lease is another's, released,
// broken or breaking), 412 (the lease is lost) and 404 (the blob or its
// container is gone). Other errors (5xx, the network) are returned as
// they are: the store may still hold the lease, and the Client retries.
func notHeld(op string, err error) error {
	switch statusOf(err) {
	case http.StatusConflict, http.StatusPreconditionFailed, http.StatusNotFound:
		return fmt.Errorf("%s: %w (%w)", op, fence.ErrNotHeld, storageErr("", err))
	}
	return storageErr(op, err)
}
