package fenceaztable_test

import (
	"context"
	"time"

	"testing"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceaztable"
	"github.com/fencing/fence/fencetest"
)

// TestConformance runs fence's conformance suite against Azurite's Table
// service. Store.Delete frees the key behind its holder's back (Break), as
// an operator would; Wipe deletes the entity, counter and all. The lease
// is bound to no session: no KillSession.
func TestConformance(t *testing.T) {
	fencetest.Run(t, fencetest.Config{
		TTL: 2 * time.Second,
		Setup: func(t *testing.T) fencetest.Store {
			connect := server(t)
			s := mustOpen(t, connect)
			return fencetest.Store{
				Connect: connect,
				Delete: func(ctx context.Context, key string) error {
					_, err := s.Break(ctx, key, 0)
					return err
				},
				// The entity goes, and its counter with it. The seed has a
				// resolution of a second, and assumes (docs/aztable.md)
				// that a counter is not lost within the second it was
				// last written: wait that out first.
				Wipe: func(ctx context.Context, key string) error {
					time.Sleep(1100 * time.Millisecond)
					_, err := s.Table().DeleteEntity(ctx, fenceaztable.PartitionKey(key), "lock", nil)
					return err
				},
				// Entities stay (they are the counters); what must not
				// stay is a holder.
				Leftovers: func(ctx context.Context, prefix string) ([]string, error) {
					hs, err := s.List(ctx, prefix)
					var left []string
					for _, h := range hs {
						left = append(left, "held: "+h.Key)
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
