package fencek8s

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/unavail"
)

func TestUnavailable(t *testing.T) {
	leases := schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"refused", &url.Error{Op: "Get", URL: "https://127.0.0.1:1", Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, true},
		{"too many requests", apierrors.NewTooManyRequests("the server is overloaded", 1), true},
		{"storage unreachable", apierrors.NewServerTimeout(leases, "get", 2), true},
		{"timeout", apierrors.NewTimeoutError("request did not complete within requested timeout", 0), true},
		{"service unavailable", apierrors.NewServiceUnavailable("not ready"), true},
		{"etcd leader changed", apierrors.NewGenericServerResponse(500, "PUT", leases, "k", "etcdserver: leader changed", 0, false), true},
		{"etcd timeout", apierrors.NewInternalError(errors.New("etcdserver: request timed out, possibly due to connection lost")), true},
		{"http2 lost", fmt.Errorf("Get %q: http2: client connection lost", "https://127.0.0.1:1"), true},
		{"client rate limit", fmt.Errorf("client rate limiter Wait returned an error: %w", errors.New("rate: Wait(n=1) would exceed context deadline")), true},
		{"client rate limit, cancelled", fmt.Errorf("client rate limiter Wait returned an error: %w", context.Canceled), false},
		{"other internal error", apierrors.NewInternalError(errors.New("unable to decode an event from the watch stream")), false},
		{"conflict", apierrors.NewConflict(leases, "k", errors.New("the object has been modified")), false},
		{"exists", apierrors.NewAlreadyExists(leases, "k"), false},
		{"forbidden", apierrors.NewForbidden(leases, "k", errors.New("no RBAC")), false},
		{"held", &fence.HeldError{Key: "k"}, false},
	} {
		err := fmt.Errorf("fencek8s: acquire %q: %w", "k", c.err)
		if got := errors.Is(unavail.Mark(err, unavailable), fence.ErrUnavailable); got != c.want {
			t.Errorf("%s: %v matches ErrUnavailable: %v; want %v", c.name, err, got, c.want)
		}
	}
}
