package fencepg_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencepg"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// BenchmarkExtendBatch extends 1,000 lease-mode claims in one round trip,
// by ExtendBatch's one statement (unnest) and by a pipeline of the
// claims' own Extend statements, and reports the server's CPU time per
// batch (server-cpu-µs/op: its backend's user and system time, from
// /proc, on a pool of one connection).
func BenchmarkExtendBatch(b *testing.B) {
	const n = 1000
	srv := testserver.Postgres(b)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(srv.DSN())
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 1
	pool := poolFrom(b, cfg)
	if err := fencepg.Setup(ctx, pool); err != nil {
		b.Fatal(err)
	}
	d, err := fencepg.NewLeaseStore(pool)
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	claims := make([]fence.Claim, n)
	ttls := make([]time.Duration, n)
	for i := range claims {
		key := "bench/" + strconv.Itoa(i)
		if claims[i], err = d.TryAcquire(ctx, fence.Request{Key: key, Owner: "o-" + key, TTL: time.Minute}); err != nil {
			b.Fatal(err)
		}
		ttls[i] = time.Minute
	}
	var pid int
	if err := pool.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		b.Fatal(err)
	}
	const extend = `UPDATE fence_locks AS l SET expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
		WHERE l.key = $1 AND l.owner = $2 AND l.expires_at > clock_timestamp()`
	for _, tc := range []struct {
		name string
		run  func(b *testing.B)
	}{
		{"unnest", func(b *testing.B) {
			for _, err := range d.ExtendBatch(ctx, claims, ttls) {
				if err != nil {
					b.Fatal(err)
				}
			}
		}},
		{"pipeline", func(b *testing.B) {
			batch := &pgx.Batch{}
			for i := range n {
				key := "bench/" + strconv.Itoa(i)
				batch.Queue(extend, key, "o-"+key, int64(time.Minute/time.Microsecond))
			}
			br := pool.SendBatch(ctx, batch)
			for range n {
				tag, err := br.Exec()
				if err != nil || tag.RowsAffected() != 1 {
					b.Fatal(tag, err)
				}
			}
			if err := br.Close(); err != nil {
				b.Fatal(err)
			}
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			tc.run(b) // warm up: plans, prepared statements
			cpu := cpuTicks(b, pid)
			b.ResetTimer()
			for b.Loop() {
				tc.run(b)
			}
			b.StopTimer()
			// Clock ticks of 10 ms (USER_HZ 100).
			b.ReportMetric(float64(cpuTicks(b, pid)-cpu)*1e4/float64(b.N), "server-cpu-µs/op")
		})
	}
}

// cpuTicks is a process's user and system time, in clock ticks.
func cpuTicks(b *testing.B, pid int) int64 {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		b.Skipf("server process: %v", err)
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}
