package fenceazblob

import (
	"errors"
	"net"
	"net/url"
	"syscall"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/azkit"
	"github.com/fencing/fence/internal/kit/unavail"
)

func TestUnavailable(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"refused", &url.Error{Op: "Head", URL: "http://127.0.0.1:1", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, true},
		{"server busy", &azcore.ResponseError{StatusCode: 503, ErrorCode: "ServerBusy"}, true},
		{"operation timed out", &azcore.ResponseError{StatusCode: 500, ErrorCode: "OperationTimedOut"}, true},
		{"throttled", &azcore.ResponseError{StatusCode: 429}, true},
		{"lease present", &azcore.ResponseError{StatusCode: 409, ErrorCode: "LeaseAlreadyPresent"}, false},
		{"condition not met", &azcore.ResponseError{StatusCode: 412, ErrorCode: "ConditionNotMet"}, false},
		{"forbidden", &azcore.ResponseError{StatusCode: 403, ErrorCode: "AuthorizationFailure"}, false},
		{"held", &fence.HeldError{Key: "k"}, false},
	} {
		err := azkit.Err("fenceazblob: acquire", c.err)
		if got := errors.Is(unavail.Mark(err, azkit.Unavailable), fence.ErrUnavailable); got != c.want {
			t.Errorf("%s: %v matches ErrUnavailable: %v; want %v", c.name, err, got, c.want)
		}
	}
}
