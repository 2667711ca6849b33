package fenceetcd_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testkit/leaderloss"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestClusterLeaderLoss kills the Raft leader of a 3-member cluster
// (leaderloss): a waiter, queued in the store, waits through the election
// and gets the key; a holder keeps its lease or loses it loudly; tokens go
// on growing.
func TestClusterLeaderLoss(t *testing.T) {
	cluster := testserver.EtcdCluster(t, 3)
	cli := newClient(t, cluster.Endpoints())
	leaderloss.Run(t, leaderloss.Cluster{
		Holder: newFence(t, newDriver(t, cluster.Endpoints())),
		Waiter: newFence(t, newDriver(t, cluster.Endpoints())),
		TTL:    ttl,
		// An election takes about a second; the holder's release must
		// not wait out etcd's own request timeout (5 s and two election
		// timeouts) before it goes on in the background.
		GrantWithin: 5 * time.Second,
		// Every write goes through the one Raft leader.
		KillLeader: func(t *testing.T, _ string) func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for ctx.Err() == nil {
				for _, m := range cluster.Members {
					st, err := cli.Status(ctx, m.Endpoint())
					if err != nil || st.Leader != st.Header.MemberId {
						continue
					}
					m.Kill()
					t.Logf("killed the leader %s", m.Name())
					return m.Restart
				}
				time.Sleep(100 * time.Millisecond)
			}
			t.Fatal("no member of the cluster says it leads")
			return nil
		},
	})
}
