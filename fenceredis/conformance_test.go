package fenceredis

import (
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencetest"
	"github.com/fencing/fence/internal/testserver"
)

const suiteTTL = time.Second

func store(connect func(t *testing.T) string) func(t *testing.T) fencetest.Store {
	return func(t *testing.T) fencetest.Store {
		c := connect(t)
		r := newRaw(t, c)
		return fencetest.Store{Connect: c, Delete: r.deleteLock, Leftovers: r.leftovers}
	}
}

func TestConformanceSingle(t *testing.T) {
	fencetest.Run(t, fencetest.Config{
		TTL:   suiteTTL,
		Setup: store(func(t *testing.T) string { return connectSingle(testserver.Redis(t)) }),
		Open:  func(c string) (fence.Driver, func() error, error) { return open(c) },
	})
}

func TestConformanceCluster(t *testing.T) {
	fencetest.Run(t, fencetest.Config{
		TTL:   suiteTTL,
		Setup: store(func(t *testing.T) string { return connectCluster(testserver.RedisCluster(t, 3)) }),
		Open:  func(c string) (fence.Driver, func() error, error) { return open(c) },
	})
}

func TestConformanceRedlock3(t *testing.T) {
	fencetest.Run(t, fencetest.Config{
		TTL:   suiteTTL,
		Setup: store(func(t *testing.T) string { return connectRedlock(testserver.Redises(t, 3)) }),
		Open:  func(c string) (fence.Driver, func() error, error) { return open(c) },
	})
}

func TestConformanceRedlock5(t *testing.T) {
	fencetest.Run(t, fencetest.Config{
		TTL:   suiteTTL,
		Setup: store(func(t *testing.T) string { return connectRedlock(testserver.Redises(t, 5)) }),
		Open:  func(c string) (fence.Driver, func() error, error) { return open(c) },
	})
}
