package fenceazblob_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencetest"
)

// TestConformance runs fence's conformance suite against Azurite, with
// fenceazblob's shortest lease: 15 s. Store.Delete breaks the lease behind
// its holder's back, as an operator would.
func TestConformance(t *testing.T) {
	fencetest.Run(t, fencetest.Config{
		TTL: 15 * time.Second,
		Setup: func(t *testing.T) fencetest.Store {
			connect := server(t)
			s := mustOpen(t, connect)
			return fencetest.Store{
				Connect: connect,
				Delete:  s.Break,
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
			}
		},
		Open: func(connect string) (fence.Driver, func() error, error) {
			return open(connect)
		},
	})
}
