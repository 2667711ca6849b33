package fenceetcd_test

import (
	"strings"
	"testing"

	"github.com/fencing/fence/internal/partitiontest"
	"github.com/fencing/fence/internal/testserver"
)

// Five worker processes share 32 partitions on etcd; one is killed with
// SIGKILL (its session lease expires 1.5 TTL later), another joins, then
// both at once.
func TestPartitionProcesses(t *testing.T) {
	partitiontest.Run(t, partitiontest.Config{
		TTL:   ttl,
		Setup: func(t *testing.T) string { return strings.Join(testserver.Etcd(t).Endpoints(), ",") },
		Open:  open,
	})
}
