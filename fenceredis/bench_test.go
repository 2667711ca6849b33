package fenceredis

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// BenchmarkHandoff measures the time from a holder's Release to the next
// holder's Acquire returning, with 1, 8 and 32 others waiting on the key
// (each contender its own driver and connections, like separate
// machines). One op is one handoff; the metrics are its mean, median and
// 99th percentile.
//
//	go test -run '^$' -bench Handoff -benchtime 500x ./fenceredis
func BenchmarkHandoff(b *testing.B) {
	deployments := []struct {
		name  string
		start func(b *testing.B) string
	}{
		{"single", func(b *testing.B) string { return connectSingle(testserver.Redis(b)) }},
		{"cluster", func(b *testing.B) string { return connectCluster(testserver.RedisCluster(b, 3)) }},
		{"redlock3", func(b *testing.B) string { return connectRedlock(testserver.Redises(b, 3)) }},
	}
	for _, d := range deployments {
		b.Run(d.name, func(b *testing.B) {
			connect := d.start(b)
			for _, waiters := range []int{1, 8, 32} {
				b.Run(fmt.Sprintf("waiters=%d", waiters), func(b *testing.B) {
					benchHandoff(b, connect, waiters)
				})
			}
		})
	}
}

func benchHandoff(b *testing.B, connect string, waiters int) {
	key := fmt.Sprintf("bench/%d/%d", waiters, time.Now().UnixNano())
	clients := make([]*fence.Client, waiters+1)
	for i := range clients {
		clients[i] = mustClient(b, mustOpen(b, connect), fence.WithTTL(10*time.Second))
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		released atomic.Int64 // when the last Release started, unix ns; 0 once counted
		mu       sync.Mutex
		lat      = make([]time.Duration, 0, b.N)
		wg       sync.WaitGroup
	)
	b.ResetTimer()
	for _, c := range clients {
		wg.Go(func() {
			for {
				l, err := c.Acquire(ctx, key)
				if err != nil {
					return // the benchmark is over
				}
				if r := released.Swap(0); r != 0 {
					mu.Lock()
					lat = append(lat, time.Since(time.Unix(0, r)))
					if len(lat) >= b.N {
						cancel()
					}
					mu.Unlock()
				}
				released.Store(time.Now().UnixNano())
				if err := l.Release(context.Background()); err != nil {
					b.Errorf("Release: %v", err)
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	var sum time.Duration
	for _, d := range lat {
		sum += d
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	b.ReportMetric(us(sum/time.Duration(len(lat))), "µs/handoff")
	b.ReportMetric(us(lat[len(lat)/2]), "p50-µs")
	b.ReportMetric(us(lat[len(lat)*99/100]), "p99-µs")
}
