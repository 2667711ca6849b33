package fencezk_test

import (
	"context"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencezk"
	"github.com/fencing/fence/internal/testkit/leaderloss"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestEnsembleLeaderLoss runs fence on a ZooKeeper ensemble of 3 and
// kills its leader (leaderloss): a waiter, queued in the store, waits
// through the election and gets the key; a holder keeps its session's
// lease or loses it loudly; tokens go on growing.
func TestEnsembleLeaderLoss(t *testing.T) {
	e := testserver.ZooKeeperEnsemble(t, 3)
	dial := func() *fence.Client {
		d, err := fencezk.Dial(e.Addrs(), sessionTimeout)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		return fence.New(d, fence.WithTTL(ttl))
	}
	holder, waiter := dial(), dial()
	leaderloss.Run(t, leaderloss.Cluster{
		Holder: holder, Waiter: waiter, TTL: ttl,
		// An election takes about a second.
		GrantWithin: 5 * time.Second,
		// Every write of the ensemble goes through its one leader.
		KillLeader: func(t *testing.T, _ string) func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			leader := e.Leader(ctx)
			for leader == nil && ctx.Err() == nil {
				time.Sleep(100 * time.Millisecond)
				leader = e.Leader(ctx)
			}
			if leader == nil {
				t.Fatal("no server of the ensemble says it leads")
			}
			leader.Kill()
			t.Logf("killed the ensemble's leader %s", leader.Addr())
			return func() {
				if err := leader.Start(); err != nil {
					t.Fatalf("restart %s: %v", leader.Addr(), err)
				}
			}
		},
	})
}
