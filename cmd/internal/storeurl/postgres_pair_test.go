package storeurl_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/cmd/internal/storeurl"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestOpenPostgresStandbyFirst: a URL naming a standby and then its
// primary, with target_session_attrs=read-write, reaches the primary;
// without the parameter it reaches the first host, the standby, which
// refuses an acquisition (25006, read-only transaction).
func TestOpenPostgresStandbyFirst(t *testing.T) {
	pr := testserver.PostgresPair(t, testserver.Asynchronous)
	hosts := pr.Standby().Addr() + "," + pr.Primary().Addr()
	raw := fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable&target_session_attrs=read-write", hosts, pr.Primary().Database())
	drv, closer, err := storeurl.Open(context.Background(), raw)
	if err != nil {
		t.Fatalf("Open(%s): %v", raw, err)
	}
	useDriver(t, drv)
	if err := closer.Close(); err != nil {
		t.Error(err)
	}

	raw = fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", hosts, pr.Primary().Database())
	drv, closer, err = storeurl.Open(context.Background(), raw)
	if err != nil {
		t.Fatalf("Open(%s): %v", raw, err)
	}
	defer closer.Close()
	c := fence.New(drv, fence.WithTTL(10*time.Second))
	l, err := c.TryAcquire(context.Background(), "storeurl-test")
	if err == nil {
		_ = l.Release(context.Background())
		t.Fatalf("TryAcquire through %s, the standby first, succeeded; want the standby's refusal", raw)
	}
	if !strings.Contains(err.Error(), "25006") {
		t.Fatalf("TryAcquire through %s: %v; want the standby's refusal (25006)", raw, err)
	}
	t.Logf("without target_session_attrs: %v", err)
}
