package fencedynamo

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/fencing/fence"
)

// storageError is an error from the service or the transport, in one line:
// the operation, then the service's error code and what it means for a
// lease (a missing table, throttling), or the transport's error. It
// unwraps to the SDK's error, for errors.As with the SDK's types.
type storageError struct {
	op    string
	table string
	err   error
}

func storageErr(op, table string, err error) error {
	return &storageError{op: op, table: table, err: err}
}

func (e *storageError) Error() string {
	var detail string
	var api smithy.APIError
	switch {
	case missingTable(e.err):
		detail = fmt.Sprintf("table %q does not exist (or is not active yet): create it with fencedynamo.CreateTable, or open the store with WithCreateTable (docs/dynamodb.md)", e.table)
	case throttled(e.err):
		detail = "throttled by DynamoDB (" + codeOf(e.err) + "), retries exhausted: the table's or the account's throughput is too low for this load (docs/dynamodb.md)"
	case errors.As(e.err, &api):
		detail = api.ErrorCode() + ": " + api.ErrorMessage()
		if st := statusOf(e.err); st != 0 {
			detail = fmt.Sprintf("%d %s", st, detail)
		}
	case errors.Is(e.err, context.Canceled), errors.Is(e.err, context.DeadlineExceeded):
		detail = e.err.Error()
	default:
		detail = "DynamoDB unreachable or no answer: " + e.err.Error()
	}
	if e.op == "" {
		return detail
	}
	return e.op + ": " + detail
}

func (e *storageError) Unwrap() error { return e.err }

// statusOf returns the HTTP status of a service error; 0 for others.
func statusOf(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) && re.Response != nil {
		return re.HTTPStatusCode()
	}
	return 0
}

// codeOf returns the service's error code; "" for other errors.
func codeOf(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return ""
}

// missingTable reports whether the service says the table does not exist.
func missingTable(err error) bool {
	var nf *types.ResourceNotFoundException
	return errors.As(err, &nf)
}

// throttled reports whether the service refused a request for throughput.
func throttled(err error) bool {
	switch codeOf(err) {
	case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded":
		return true
	}
	return false
}

// unavailable reports whether err is the service's answer that it could
// not serve the request for now: an acquisition's error that matches
// fence.ErrUnavailable (unavail.Mark), besides the network errors every
// client shares (the SDK returns the transport's error, wrapped, once its
// retries are spent). These are the answers the SDK's standard retryer
// retries (aws/retry: throttling codes and 5xx statuses), so a Client
// sees them only once that retryer has given up. A missing table is not
// one: it will not appear by waiting.
func unavailable(err error) bool {
	if missingTable(err) {
		return false
	}
	switch codeOf(err) {
	case "InternalServerError", "ServiceUnavailable", "RequestTimeout", "RequestTimeoutException":
		return true
	}
	return throttled(err) || statusOf(err) >= 500
}

// refused reports whether the service answered a request with a client
// error, so that it changed nothing.
func refused(err error) bool {
	st := statusOf(err)
	return st >= 400 && st < 500 && st != http.StatusRequestTimeout && !throttled(err)
}

// conflict reports whether a conditional write was refused because the
// item is not as the writer read it: changed, gone, or (for a first
// write) already there.
func conflict(err error) bool {
	var cf *types.ConditionalCheckFailedException
	return errors.As(err, &cf)
}

// notHeldErr wraps a conditional write's refusal as fence.ErrNotHeld.
func notHeldErr(op, table string, err error) error {
	return fmt.Errorf("%s: %w (%w)", op, fence.ErrNotHeld, storageErr("", table, err))
}
