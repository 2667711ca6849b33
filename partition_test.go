package fence_test

import (
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
	"github.com/fencing/fence/internal/testkit/obstest"
)

// A partition whose lease the store dropped while its work ran, found only
// when the partition is released after the work returned, is reported as
// loudly as a loss found during the work: a "lease lost" log line at
// error level and a loss reported to the observer (fence.losses).
func TestPartitionLossFoundAtReleaseIsReported(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		store := fencemem.New()
		var rec obstest.Recorder
		var logs syncBuffer
		// Without renewal, only the release can find the loss; the hour's
		// TTL outlasts the test's rounds (every 20 minutes).
		c := fence.New(store, fence.WithObserver(&rec), fence.WithTTL(time.Hour), fence.WithoutRenewal(),
			fence.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
		parts := c.Partitions("g", []string{"p"})
		var calls atomic.Int32
		done := make(chan error, 1)
		go func() {
			done <- parts.Run(ctx, func(ctx context.Context, partition string, l *fence.Lease) error {
				if calls.Add(1) == 1 {
					store.Delete("g/partitions/p") // behind the worker's back
					return nil                     // work done: the partition is released next round
				}
				<-ctx.Done()
				return nil
			})
		}()
		synctest.Wait()
		if n := calls.Load(); n != 1 {
			t.Fatalf("work ran %d times in the first round; want once", n)
		}
		if strings.Contains(logs.String(), "lease lost") {
			t.Fatalf("loss logged before the release; logs:\n%s", logs.String())
		}
		time.Sleep(time.Hour / 3) // next round: release, then take it again
		synctest.Wait()
		line := ""
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "lease lost") {
				line = l
			}
		}
		for _, want := range []string{"level=ERROR", "key=g/partitions/p", "reason=refused", "found_by=release"} {
			if !strings.Contains(line, want) {
				t.Errorf("loss log line %q lacks %s; logs:\n%s", line, want, logs.String())
			}
		}
		var losses int
		for _, e := range obstest.Of[fence.LeaseEnded](&rec) {
			if e.Reason == fence.LossRefused {
				losses++
			}
		}
		if losses != 1 {
			t.Errorf("losses (refused) reported = %d; want 1", losses)
		}
		if n := calls.Load(); n != 2 {
			t.Errorf("work ran %d times; want the partition taken again (2); logs:\n%s", n, logs.String())
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}
