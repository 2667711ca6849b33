package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testkit/testserver"
)

// The Go benchmarks share one set of servers, started on first use and
// stopped when the test binary ends.
var (
	shared struct {
		once sync.Once
		env  *testserver.Env
		srv  *Servers
		err  error
	}
)

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.env != nil {
		shared.srv.Close()
		shared.env.Close()
	}
	os.Exit(code)
}

func sharedServers(b *testing.B) *Servers {
	shared.once.Do(func() {
		shared.env = testserver.NewEnv("bench", nil)
		shared.err = shared.env.Do(func(tb testing.TB) { shared.srv = StartServers(tb, Stores) })
	})
	if errors.Is(shared.err, testserver.ErrUnavailable) && !testserver.Strict() {
		b.Skip(shared.err)
	}
	if shared.err != nil {
		b.Fatal(shared.err)
	}
	return shared.srv
}

// BenchmarkAcquireRelease is one uncontended acquire + release per op,
// for every contender:
//
//	go test -run '^$' -bench AcquireRelease -benchmem
func BenchmarkAcquireRelease(b *testing.B) {
	srv := sharedServers(b)
	for _, c := range Contenders(srv) {
		b.Run(c.ID(), func(b *testing.B) {
			ctx := context.Background()
			rt := new(atomic.Int64)
			cl, err := c.Open(ctx, rt)
			if err != nil {
				b.Fatal(err)
			}
			defer cl.Close()
			lk := cl.Locker()
			defer closeLocker(lk)
			key := "bench/go/" + c.Name
			if err := lk.Lock(ctx, key); err != nil { // warm up
				b.Fatal(err)
			}
			if err := lk.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			rt0 := rt.Load()
			b.ResetTimer()
			for b.Loop() {
				if err := lk.Lock(ctx, key); err != nil {
					b.Fatal(err)
				}
				if err := lk.Unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(rt.Load()-rt0)/float64(b.N), "roundtrips/op")
		})
	}
}

// BenchmarkHandoff is one handoff per op (release to the next waiter
// holding the lock), with 1, 8 and 32 waiters:
//
//	go test -run '^$' -bench Handoff -benchtime 50x
func BenchmarkHandoff(b *testing.B) {
	srv := sharedServers(b)
	for _, c := range Contenders(srv) {
		for _, w := range []int{1, 8, 32} {
			b.Run(fmt.Sprintf("%s/waiters=%d", c.ID(), w), func(b *testing.B) {
				key := fmt.Sprintf("bench/go/h%d/%s/%d", w, c.Name, time.Now().UnixNano())
				lat, err := handoff(context.Background(), c, w, b.N, time.Millisecond, key)
				if err != nil {
					b.Fatal(err)
				}
				s := summarize(lat)
				b.ReportMetric(float64(s.P50)/1e6, "p50-ms")
				b.ReportMetric(float64(s.P99)/1e6, "p99-ms")
			})
		}
	}
}

// TestQuickRun runs the command's measurement with tiny numbers against
// private servers and checks that every figure and ratio of the report
// is there. It asserts nothing about speed.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers and measures for several seconds")
	}
	srv := StartServers(t, Stores)
	t.Cleanup(srv.Close)
	cfg := Config{Rounds: 1, Ops: 5, Parallel: 4, Handoffs: 2, Waiters: []int{1, 8, 32}, Hold: 2 * time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Measure(ctx, srv, Stores, cfg)
	if err != nil {
		t.Fatal(err)
	}
	rep.Command = "go run ./cmd/fence-bench -quick"

	for _, store := range Stores {
		names := map[string]bool{}
		for _, r := range rep.store(store) {
			names[r.Contender.Name] = true
		}
		for _, c := range Comparisons(store) {
			if !names[c.Fence] || !names[c.Other] {
				t.Errorf("%s: comparison %s ÷ %s names a missing contender", store, c.Fence, c.Other)
			}
		}
		rows := rep.Rows(store)
		want := 10 + 2*len(cfg.Waiters)
		if store == "redis" || slices.ContainsFunc(rows, func(r Row) bool { return r.Label == serverTimeLabel }) {
			want++ // server time: always from Redis, from PostgreSQL with pg_stat_statements
		}
		if len(rows) != want {
			t.Errorf("%s: %d rows, want %d", store, len(rows), want)
		}
		for _, row := range rows {
			for name := range names {
				if v := row.Values[name]; !(v > 0) {
					t.Errorf("%s: %s: %s = %v, want a positive figure", store, row.Label, name, v)
				}
			}
			if len(row.Ratios) != len(Comparisons(store)) {
				t.Errorf("%s: %s: %d ratios, want %d", store, row.Label, len(row.Ratios), len(Comparisons(store)))
			}
			for i, x := range row.Ratios {
				if !(x > 0) {
					t.Errorf("%s: %s: ratio %d = %v, want a positive ratio", store, row.Label, i, x)
				}
			}
		}
	}
	if n := len(rep.Targets()); n == 0 {
		t.Error("no targets judged")
	}

	var md bytes.Buffer
	if err := rep.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"go run ./cmd/fence-bench -quick", "## Redis", "## PostgreSQL", "## etcd",
		"fence ÷ redsync", "fence-session ÷ pgx-advisory", "fence ÷ etcd-mutex", "## Targets", "CPU"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(md.String(), "NaN") || strings.Contains(md.String(), "Inf") {
		t.Errorf("report has NaN or Inf:\n%s", md.String())
	}
}

// Every round's turns are a permutation of the contenders, and no
// contender follows the same one in most rounds (a rotation puts it after
// the same contender in nine rounds of ten, and so that contender's
// aftermath on the machine on nearly its every turn).
func TestTurnOrderVariesThePredecessor(t *testing.T) {
	const n, rounds = 5, 10
	after := make([]map[int]int, n) // after[i][j]: turns of i right after one of j
	for i := range after {
		after[i] = map[int]int{}
	}
	prev := -1
	for round := range rounds {
		order := turnOrder(n, round)
		if got := slices.Sorted(slices.Values(order)); !slices.Equal(got, []int{0, 1, 2, 3, 4}) {
			t.Fatalf("round %d: order %v is not a permutation of %d contenders", round, order, n)
		}
		if !slices.Equal(order, turnOrder(n, round)) {
			t.Errorf("round %d: the order differs from one call to the next", round)
		}
		for _, i := range order {
			if prev >= 0 {
				after[i][prev]++
			}
			prev = i
		}
	}
	for i, a := range after {
		for j, k := range a {
			if k > rounds/2 {
				t.Errorf("contender %d came right after %d in %d rounds of %d", i, j, k, rounds)
			}
		}
	}
}
