package fencetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fencing/fence"
)

// memberWorker is one worker of the in-process Partitions check, on a
// client of its own.
type memberWorker struct {
	name   string
	p      *fence.Partitions
	cancel context.CancelFunc
	done   chan error
}

// partitionLog records, per partition, the work intervals and the writes a
// guarded resource accepted or refused.
type partitionLog struct {
	mu        sync.Mutex
	guard     fence.MemoryGuard
	intervals map[string][]interval
	refused   int
}

type interval struct {
	worker     string
	token      int64
	start, end time.Time
}

func (pl *partitionLog) work(worker string) func(ctx context.Context, partition string, l *fence.Lease) error {
	return func(ctx context.Context, partition string, l *fence.Lease) error {
		start := time.Now()
		defer func() {
			pl.mu.Lock()
			pl.intervals[partition] = append(pl.intervals[partition], interval{worker, l.Token(), start, time.Now()})
			pl.mu.Unlock()
		}()
		for {
			err := pl.guard.Admit(ctx, partition, l.Token())
			if errors.Is(err, fence.ErrStale) {
				pl.mu.Lock()
				pl.refused++
				pl.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(2 * time.Millisecond):
			}
		}
	}
}

// partitions checks fence.Partitions on the store: in worker processes,
// one of them killed, where the store reaches across processes; in
// goroutines otherwise.
func (s *suite) partitions(t *testing.T) {
	c := s.client(t)
	if _, ok := c.Driver().(fence.Inspector); !ok {
		t.Skip("driver does not implement fence.Inspector")
	}
	if !s.cfg.SingleProcess {
		s.partitionProcesses(t)
		return
	}
	group := s.key(t, "g")
	names := make([]string, 8)
	for i := range names {
		names[i] = fmt.Sprintf("p%d", i)
	}
	pl := &partitionLog{intervals: map[string][]interval{}}
	var workers []*memberWorker
	startWorker := func(name string) *memberWorker {
		ctx, cancel := context.WithCancel(context.Background())
		w := &memberWorker{name: name, cancel: cancel, done: make(chan error, 1)}
		w.p = s.client(t).Partitions(group, names, fence.WithOwner(name))
		go func() { w.done <- w.p.Run(ctx, pl.work(name)) }()
		workers = append(workers, w)
		return w
	}
	stopWorker := func(w *memberWorker) {
		w.cancel()
		if err := <-w.done; err != nil {
			t.Errorf("worker %s: Run: %v", w.name, err)
		}
		if owned := w.p.Owned(); len(owned) != 0 {
			t.Errorf("worker %s still owns %v after Run returned", w.name, owned)
		}
	}
	defer func() {
		for _, w := range workers {
			w.cancel()
		}
	}()
	balanced := func(live []*memberWorker, when string) {
		t.Helper()
		deadline := time.Now().Add(30*s.cfg.TTL + s.slack())
		for {
			owned := map[string][]string{}
			for _, w := range live {
				owned[w.name] = w.p.Owned()
			}
			counts, total, spread, clash := tally(owned)
			if clash != "" {
				t.Errorf("%s: partition %s at once", when, clash)
			}
			if total == len(names) && spread <= 1 {
				t.Logf("%s: balanced %v", when, counts)
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%s: not balanced within %v: %v (total %d of %d)", when, 30*s.cfg.TTL+s.slack(), counts, total, len(names))
				return
			}
			time.Sleep(s.cfg.TTL / 10)
		}
	}

	a, b := startWorker("a"), startWorker("b")
	balanced([]*memberWorker{a, b}, "two workers")
	cw := startWorker("c")
	balanced([]*memberWorker{a, b, cw}, "after a third joined")
	stopWorker(a)
	balanced([]*memberWorker{b, cw}, "after the first left")
	stopWorker(b)
	stopWorker(cw)

	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.refused > 0 {
		t.Errorf("the guarded resource refused %d stale writes: two workers worked one partition at once", pl.refused)
	}
	for p, ivs := range pl.intervals {
		for i, x := range ivs {
			for _, y := range ivs[i+1:] {
				if x.start.Before(y.end) && y.start.Before(x.end) {
					t.Errorf("partition %s worked by %s (token %d) and %s (token %d) at once", p, x.worker, x.token, y.worker, y.token)
				}
			}
		}
	}
	if len(pl.intervals) != len(names) {
		t.Errorf("%d of %d partitions were ever worked", len(pl.intervals), len(names))
	}
}

// tally sums up who owns which partitions, by worker: how many each, how
// many in all, the most minus the fewest, and a partition owned by two
// ("" if none).
func tally(owned map[string][]string) (counts map[string]int, total, spread int, clash string) {
	counts = map[string]int{}
	owner := map[string]string{}
	lo, hi := -1, 0
	for name, ps := range owned {
		counts[name] = len(ps)
		total += len(ps)
		if lo < 0 || len(ps) < lo {
			lo = len(ps)
		}
		hi = max(hi, len(ps))
		for _, p := range ps {
			if o, ok := owner[p]; ok {
				clash = fmt.Sprintf("%s owned by %s and %s", p, o, name)
			}
			owner[p] = name
		}
	}
	return counts, total, hi - max(lo, 0), clash
}
