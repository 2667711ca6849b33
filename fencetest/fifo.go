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

// queued waits until the store's queue of key for kind holds n entries.
func (s *suite) queued(t *testing.T, ctx context.Context, key string, kind fence.Kind, n int) {
	t.Helper()
	deadline := time.Now().Add(s.slack())
	for {
		got, err := s.store.Queue(ctx, key, kind)
		if err == nil && got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue of %q (%s): %d entries, %v; want %d", key, kind, got, err, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// arrivals collects the grants to waiters in the order they come.
type arrivals struct {
	mu     sync.Mutex
	order  []int
	leases map[int]*fence.Lease
}

func (g *arrivals) add(i int, l *fence.Lease) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.order = append(g.order, i)
	g.leases[i] = l
}

func (g *arrivals) snapshot() ([]int, map[int]*fence.Lease) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]int(nil), g.order...), g.leases
}

// settle waits until exactly n waiters hold, and stays long enough for a
// wrongly admitted extra one to show.
func (s *suite) settle(t *testing.T, g *arrivals, n int) {
	t.Helper()
	deadline := time.Now().Add(s.slack())
	for {
		order, _ := g.snapshot()
		if len(order) > n || len(order) < n && time.Now().After(deadline) {
			t.Fatalf("waiters %v hold; want the first %d", order, n)
		}
		if len(order) == n {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if order, _ := g.snapshot(); len(order) != n {
		t.Fatalf("waiters %v hold; want the first %d", order, n)
	}
}

// checkOrder checks that the waiters held in the order want, each with a
// token above the one before (starting from after).
func checkOrder(t *testing.T, g *arrivals, want string, after int64) {
	t.Helper()
	order, leases := g.snapshot()
	if fmt.Sprint(order) != want {
		t.Errorf("waiters got the key in order %v; want %s (FIFO)", order, want)
	}
	last := after
	for _, i := range order {
		if tok := leases[i].Token(); tok <= last {
			t.Errorf("waiter %d's token %d is not above the earlier grant's %d", i, tok, last)
		}
		last = leases[i].Token()
	}
}

// fifo checks that waiters for a lock are served in arrival order, and
// that one that gives up leaves its place.
func (s *suite) fifo(t *testing.T) {
	if s.store.Queue == nil {
		t.Skip("Store.Queue not given: the store does not queue waiters")
	}
	ctx := s.ctx(t)
	key := s.key(t, "k")
	held := mustAcquire(t, ctx, s.client(t), key)
	const waiters, quitter = 5, 2
	g := &arrivals{leases: make(map[int]*fence.Lease)}
	var wg sync.WaitGroup
	cancels := make([]context.CancelFunc, waiters)
	for i := range waiters {
		c := s.client(t)
		wctx, cancel := context.WithCancel(ctx)
		cancels[i] = cancel
		defer cancel()
		wg.Go(func() {
			l, err := c.Acquire(wctx, key)
			if i == quitter {
				if !errors.Is(err, context.Canceled) {
					t.Errorf("waiter that gave up: %v; want context.Canceled", err)
				}
				return
			}
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			g.add(i, l)
			time.Sleep(20 * time.Millisecond)
			if err := l.Release(ctx); err != nil {
				t.Errorf("waiter %d: release: %v", i, err)
			}
		})
		s.queued(t, ctx, key, fence.KindLock, i+2) // queued before the next comes
	}
	cancels[quitter]()
	s.queued(t, ctx, key, fence.KindLock, waiters) // its place is gone
	mustRelease(t, ctx, held)
	wg.Wait()
	checkOrder(t, g, "[0 1 3 4]", held.Token())
	s.queued(t, ctx, key, fence.KindLock, 0)
}

// semaphoreFIFO checks that semaphore waiters get slots in arrival order,
// one per slot freed, with tokens in that order.
func (s *suite) semaphoreFIFO(t *testing.T) {
	if s.store.Queue == nil {
		t.Skip("Store.Queue not given: the store does not queue waiters")
	}
	if !s.supports(t, fence.KindSemaphore) {
		t.Skip("driver does not support semaphores")
	}
	ctx := s.ctx(t)
	key := s.key(t, "k")
	const limit, waiters = 2, 3
	c := s.client(t)
	h1, err := c.Semaphore(key, limit).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := c.Semaphore(key, limit).TryAcquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	g := &arrivals{leases: make(map[int]*fence.Lease)}
	var wg sync.WaitGroup
	for i := range waiters {
		w := s.client(t)
		wg.Go(func() {
			l, err := w.Semaphore(key, limit).Acquire(ctx)
			if err != nil {
				t.Errorf("waiter %d: %v", i, err)
				return
			}
			g.add(i, l)
		})
		s.queued(t, ctx, key, fence.KindSemaphore, limit+i+1)
	}
	// Free one slot at a time: two freed at once would admit two waiters
	// together, and the order they report in would be a race.
	mustRelease(t, ctx, h2)
	s.settle(t, g, 1)
	mustRelease(t, ctx, h1)
	s.settle(t, g, 2)
	order, leases := g.snapshot()
	mustRelease(t, ctx, leases[order[0]])
	wg.Wait()
	checkOrder(t, g, "[0 1 2]", h2.Token())
	order, leases = g.snapshot()
	for _, i := range order[1:] {
		mustRelease(t, ctx, leases[i])
	}
	s.queued(t, ctx, key, fence.KindSemaphore, 0)
}
