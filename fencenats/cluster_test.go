package fencenats_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencenats"
	"github.com/fencing/fence/internal/testkit/leaderloss"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestClusterStreamLeaderLoss runs fence on a bucket of 3 replicas over 3
// servers and kills the bucket's stream leader (leaderloss): a waiter
// waits through the election (it once failed at once with "no response
// from stream"), a holder keeps its lease or loses it loudly, and tokens
// go on growing.
func TestClusterStreamLeaderLoss(t *testing.T) {
	cl := testserver.NATSCluster(t, 3)
	if !cl.Servers[0].AtLeast("2.11") {
		t.Fatalf("nats-server %s is too old for per-message TTLs (need 2.11)", cl.Servers[0].Version())
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bucket := testserver.Name("fence")
	dial := func() *fence.Client {
		d, err := fencenats.Dial(ctx, cl.URL(), bucket, fencenats.WithReplicas(3))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = d.Close() })
		return fence.New(d, fence.WithTTL(ttl))
	}
	holder, waiter := dial(), dial()
	js := connect(t, cl.URL())
	leaderloss.Run(t, leaderloss.Cluster{
		Holder: holder, Waiter: waiter, TTL: ttl,
		// Every key of the bucket is on its one stream, led by one server.
		KillLeader: func(t *testing.T, _ string) func() {
			_, info := bucketStream(ctx, t, js, bucket)
			if info.Config.Replicas != 3 || info.Cluster == nil {
				t.Fatalf("the bucket's stream: %d replicas, cluster %+v; want 3 replicas on the cluster", info.Config.Replicas, info.Cluster)
			}
			leader := cl.Named(info.Cluster.Leader)
			if leader == nil {
				t.Fatalf("stream leader %q is none of the cluster's servers", info.Cluster.Leader)
			}
			leader.Kill()
			t.Logf("killed the stream leader %s", info.Cluster.Leader)
			return func() {
				if err := leader.Start(); err != nil {
					t.Fatalf("restart %s: %v", info.Cluster.Leader, err)
				}
			}
		},
	})
}

// TestClusterReplaceEmpty: a server of the cluster that comes back without
// its store (testserver's ReplaceEmpty, the torture's restart-empty on
// nats-cluster) takes its replica of the bucket's stream back: the stream
// has three current replicas again, and the key fence wrote before is
// there, its revision kept.
func TestClusterReplaceEmpty(t *testing.T) {
	cl := testserver.NATSCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	bucket := testserver.Name("fence")
	d, err := fencenats.Dial(ctx, cl.URL(), bucket, fencenats.WithReplicas(3))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	c := fence.New(d, fence.WithTTL(10*time.Second))
	l, err := c.Acquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	js := connect(t, cl.URL())
	s, info := bucketStream(ctx, t, js, bucket)
	lastSeq := info.State.LastSeq
	// A follower: its replica must come back from the leader.
	var follower int
	for i, srv := range cl.Servers {
		if srv != cl.Named(info.Cluster.Leader) {
			follower = i
			break
		}
	}
	if err := cl.ReplaceEmpty(follower); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err = s.Info(ctx)
		current := 0
		if err == nil && info.Cluster != nil {
			for _, r := range info.Cluster.Replicas {
				if r.Current {
					current++
				}
			}
		}
		if err == nil && current == 2 && info.State.LastSeq >= lastSeq {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after ReplaceEmpty: stream info %+v, %v; want the leader and 2 current replicas, last sequence >= %d", info.Cluster, err, lastSeq)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release after the replacement: %v", err)
	}
}

// bucketStream returns the bucket's stream and its info.
func bucketStream(ctx context.Context, t *testing.T, js jetstream.JetStream, bucket string) (jetstream.Stream, *jetstream.StreamInfo) {
	t.Helper()
	s, err := js.Stream(ctx, "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s, info
}
