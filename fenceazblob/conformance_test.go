package fenceazblob_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceazblob"
	"github.com/fencing/fence/fencetest"
)

// TestConformance runs fence's conformance suite against Azurite, with
// fenceazblob's shortest lease: 15 s. Store.Delete breaks the lease behind
// its holder's back, as an operator would. A blob lease is bound to no
// session: no KillSession.
func TestConformance(t *testing.T) {
	fencetest.Run(t, fencetest.Config{
		TTL: 15 * time.Second,
		Setup: func(t *testing.T) fencetest.Store {
			connect, az := serverProcess(t)
			s := mustOpen(t, connect)
			return fencetest.Store{
				Connect: connect,
				Delete: func(ctx context.Context, key string) error {
					_, err := s.Break(ctx, key, 0)
					return err
				},
				// The blob goes, and its counter with it. The store's clock
				// has a resolution of a second, and seeding from it assumes
				// (docs/azblob.md) that a counter is not lost within the
				// second it was last written: wait that out first.
				Wipe: func(ctx context.Context, key string) error {
					time.Sleep(1100 * time.Millisecond)
					_, err := s.Container().NewBlobClient(fenceazblob.BlobName(key)).Delete(ctx, nil)
					return err
				},
				// Blobs stay (they are the counters); what must not stay is
				// a lease.
				Leftovers: func(ctx context.Context, prefix string) ([]string, error) {
					hs, err := s.List(ctx, prefix)
					var left []string
					for _, h := range hs {
						left = append(left, "leased: "+h.Key)
					}
					return left, err
				},
				// Azurite killed: connections refused. Started again on its
				// data directory; tokens grow across it in any case, seeded
				// from the service's clock where a blob was lost.
				Outage: func(t *testing.T) func() {
					az.Kill()
					return func() {
						if err := az.Start(); err != nil {
							t.Fatalf("restart Azurite: %v", err)
						}
					}
				},
			}
		},
		Open: func(connect string) (fence.Driver, func() error, error) {
			return open(connect)
		},
	})
}
