package fencefile

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/fencing/fence"
)

// A lock or counter file deleted after a grant wrote its token to it, but
// before the grant returned: that grant must not count, since its token
// lives in a file without a name and a newcomer on a new file, drawing its
// token from the clock, would run alongside it. It is done again on the
// file now at the path, which then holds the granted token.
func TestGrantRacingDeletion(t *testing.T) {
	ctx := context.Background()
	defer func() { afterGrantWrite = nil }()
	for _, kind := range []fence.Kind{fence.KindLock, fence.KindSemaphore, fence.KindRead, fence.KindWrite} {
		s, err := New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		deleted := ""
		afterGrantWrite = func(path string) {
			if deleted == "" {
				deleted = path
				if err := os.Remove(path); err != nil {
					t.Error(err)
				}
			}
		}
		c, err := s.TryAcquire(ctx, fence.Request{Key: "k", Owner: "o", TTL: time.Second, Kind: kind, Limit: 1})
		afterGrantWrite = nil
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if deleted == "" {
			t.Fatalf("%s: the hook never ran", kind)
		}
		rec := readCounter(deleted)
		if rec.Token != c.Token() {
			t.Errorf("%s: granted token %d, but the file now at %s holds %d: the grant on the deleted file counted", kind, c.Token(), deleted, rec.Token)
		}
		if err := c.Extend(ctx, time.Second); err != nil {
			t.Errorf("%s: Extend right after the grant: %v", kind, err)
		}
		c.Release(ctx)
	}
}
