package fencemem_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
	"github.com/fencing/fence/fencetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConformance(t *testing.T) {
	store := fencemem.New()
	fencetest.Run(t, fencetest.Config{
		SingleProcess: true,
		TTL:           300 * time.Millisecond,
		Setup: func(t *testing.T) fencetest.Store {
			return fencetest.Store{
				Delete: func(ctx context.Context, key string) error {
					store.Delete(key)
					return nil
				},
				Leftovers: func(ctx context.Context, prefix string) ([]string, error) {
					hs, err := store.List(ctx, prefix)
					var left []string
					for _, h := range hs {
						left = append(left, h.Key)
					}
					return left, err
				},
			}
		},
		Open: func(string) (fence.Driver, func() error, error) { return store, nil, nil },
	})
}
