package fence_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

// BenchmarkAcquireRelease is one uncontended acquire + release on the
// in-memory store: the core's own cost per lease, with a driver that does
// almost nothing.
//
//	go test -run '^$' -bench AcquireRelease -benchmem .
func BenchmarkAcquireRelease(b *testing.B) {
	c := fence.New(fencemem.New(), fence.WithTTL(30*time.Second))
	defer c.Close(context.Background())
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		l, err := c.Acquire(ctx, "k")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
