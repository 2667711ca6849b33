package fenceredis

import (
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/partitiontest"
	"github.com/fencing/fence/internal/testserver"
)

// Five worker processes share 32 partitions on one Redis; one is killed
// with SIGKILL, another joins, then both at once.
func TestPartitionProcesses(t *testing.T) {
	partitiontest.Run(t, partitiontest.Config{
		TTL:   time.Second,
		Setup: func(t *testing.T) string { return connectSingle(testserver.Redis(t)) },
		Open:  func(c string) (fence.Driver, func() error, error) { return open(c) },
	})
}
