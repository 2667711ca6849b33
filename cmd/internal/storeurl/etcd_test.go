package storeurl_test

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/fencing/fence/cmd/internal/storeurl"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestEtcdUnreachable: opening an etcd store whose endpoint refuses
// connections fails at once with the refusal; one whose endpoint accepts
// connections but never answers is waited for until the caller's
// context ends, and then fails with that, not later.
func TestEtcdUnreachable(t *testing.T) {
	for _, tc := range []struct {
		name, addr string
		want       error
	}{
		{"refused", testserver.ClosedAddr(t), syscall.ECONNREFUSED},
		{"silent", testserver.SilentAddr(t), context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const limit = 2 * time.Second
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			start := time.Now()
			_, closer, err := storeurl.Open(ctx, "etcd://"+tc.addr)
			took := time.Since(start)
			if err == nil {
				closer.Close()
				t.Fatalf("Open(etcd://%s) succeeded", tc.addr)
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("Open(etcd://%s): %v; want an error matching %v", tc.addr, err, tc.want)
			}
			if took > limit+3*time.Second {
				t.Errorf("Open(etcd://%s) took %v; want at most about %v", tc.addr, took, limit)
			}
		})
	}
}
