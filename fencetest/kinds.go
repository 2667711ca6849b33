package fencetest

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing/fence"
)

// supports reports whether drivers from cfg.Open support every kind.
func (s *suite) supports(t *testing.T, kinds ...fence.Kind) bool {
	c := s.client(t)
	ks, ok := c.Driver().(fence.KindSupporter)
	for _, k := range kinds {
		if !ok || !ks.Supports(k) {
			ctx := s.ctx(t)
			var err error
			switch k {
			case fence.KindSemaphore:
				_, err = c.Semaphore(s.key(t, "k"), 2).TryAcquire(ctx)
			case fence.KindRead:
				_, err = c.RWMutex(s.key(t, "k")).TryAcquireRead(ctx)
			case fence.KindWrite:
				_, err = c.RWMutex(s.key(t, "k")).TryAcquireWrite(ctx)
			}
			if !errors.Is(err, fence.ErrUnsupported) {
				t.Errorf("%s on a driver that does not support it: %v; want ErrUnsupported", k, err)
			}
			return false
		}
	}
	return true
}

// grant is one acquisition as seen by its caller, for real-time order
// checks: if one grant returned before another was asked for, its token
// must be lower.
type grant struct {
	invoked, returned time.Time
	token             int64
	kind              fence.Kind
}

type grants struct {
	mu  sync.Mutex
	all []grant
}

func (g *grants) add(invoked time.Time, l *fence.Lease, k fence.Kind) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.all = append(g.all, grant{invoked: invoked, returned: time.Now(), token: l.Token(), kind: k})
}

// checkOrder checks that tokens are distinct and follow real-time order.
func (g *grants) checkOrder(t *testing.T) {
	t.Helper()
	seen := map[int64]bool{}
	for _, a := range g.all {
		if seen[a.token] {
			t.Errorf("token %d granted twice", a.token)
		}
		seen[a.token] = true
		for _, b := range g.all {
			if a.returned.Before(b.invoked) && a.token >= b.token {
				t.Errorf("%s token %d was granted before %s token %d was asked for, yet is not lower", a.kind, a.token, b.kind, b.token)
				return
			}
		}
	}
}

func (s *suite) semaphore(t *testing.T) {
	if !s.supports(t, fence.KindSemaphore) {
		t.Skip("driver does not support semaphores")
	}
	ctx := s.ctx(t)
	key := s.key(t, "k")
	const limit = 3
	var holders []*fence.Lease
	var last int64
	for range limit {
		l, err := s.client(t).Semaphore(key, limit).TryAcquire(ctx)
		if err != nil {
			t.Fatalf("TryAcquire of slot %d of %d: %v", len(holders)+1, limit, err)
		}
		if l.Token() <= last {
			t.Errorf("slot token %d not greater than the previous %d", l.Token(), last)
		}
		last = l.Token()
		holders = append(holders, l)
	}
	extra := s.client(t)
	if _, err := extra.Semaphore(key, limit).TryAcquire(ctx); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("TryAcquire on a full semaphore: %v; want ErrHeld", err)
	}
	if _, err := extra.Semaphore(key, limit+1).TryAcquire(ctx); !errors.Is(err, fence.ErrLimitMismatch) {
		t.Errorf("TryAcquire with limit %d while held with %d: %v; want ErrLimitMismatch", limit+1, limit, err)
	}
	if _, err := extra.Semaphore(key, limit+1).Acquire(ctx, fence.WithWait(s.slack())); !errors.Is(err, fence.ErrLimitMismatch) {
		t.Errorf("waiting with limit %d while held with %d: %v; want ErrLimitMismatch", limit+1, limit, err)
	}
	if _, err := extra.TryAcquire(ctx, key); err != nil {
		t.Errorf("a lock on the key of a full semaphore: %v; kinds are separate namespaces", err)
	}

	// A waiter gets the slot a holder releases.
	got := make(chan *fence.Lease, 1)
	go func() {
		l, err := extra.Semaphore(key, limit).Acquire(ctx, fence.WithWait(s.slack()))
		if err != nil {
			t.Errorf("waiting for a slot: %v", err)
		}
		got <- l
	}()
	time.Sleep(s.cfg.TTL / 4)
	mustRelease(t, ctx, holders[0])
	if l := <-got; l != nil {
		if l.Token() <= last {
			t.Errorf("token %d after a release, not greater than %d", l.Token(), last)
		}
		last = l.Token()
		holders[0] = l
	}
	for _, l := range holders {
		mustRelease(t, ctx, l)
	}

	// Never more than limit holders under contention; tokens in real-time
	// order.
	var (
		inside, most atomic.Int32
		g            grants
		wg           sync.WaitGroup
	)
	for range 3 {
		c := s.client(t)
		for range 3 {
			wg.Go(func() {
				for range 3 {
					invoked := time.Now()
					l, err := c.Semaphore(key, 2).Acquire(ctx)
					if err != nil {
						t.Errorf("Acquire: %v", err)
						return
					}
					g.add(invoked, l, fence.KindSemaphore)
					n := inside.Add(1)
					for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
					}
					time.Sleep(2 * time.Millisecond)
					inside.Add(-1)
					mustRelease(t, ctx, l)
				}
			})
		}
	}
	wg.Wait()
	if m := most.Load(); m > 2 {
		t.Errorf("%d holders at once of a semaphore with limit 2", m)
	}
	g.checkOrder(t)

	if !s.cfg.SessionBound {
		// A holder that stops renewing frees its slot after the TTL.
		l, err := s.client(t).Semaphore(key, 1).TryAcquire(ctx, fence.WithoutRenewal())
		if err != nil {
			t.Fatal(err)
		}
		l2, err := extra.Semaphore(key, 1).Acquire(ctx, fence.WithWait(s.cfg.TTL+s.slack()))
		if err != nil {
			t.Fatalf("slot not freed after its holder stopped renewing: %v", err)
		}
		if l.Err() == nil {
			t.Errorf("new holder got the slot while the old holder's lease was still valid locally")
		}
		if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
			t.Errorf("Release of the expired slot: %v; want ErrLost", err)
		}
		if _, err := s.client(t).Semaphore(key, 1).TryAcquire(ctx); !errors.Is(err, fence.ErrHeld) {
			t.Errorf("the expired holder's Release freed the new holder's slot: %v", err)
		}
		mustRelease(t, ctx, l2)
	}
}

func (s *suite) rwmutex(t *testing.T) {
	if !s.supports(t, fence.KindRead, fence.KindWrite) {
		t.Skip("driver does not support reader-writer locks")
	}
	ctx := s.ctx(t)
	key := s.key(t, "k")
	a, b, c := s.client(t), s.client(t), s.client(t)
	r1, err := a.RWMutex(key).TryAcquireRead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := b.RWMutex(key).TryAcquireRead(ctx)
	if err != nil {
		t.Fatalf("second reader beside a reader: %v", err)
	}
	if _, err := c.RWMutex(key).TryAcquireWrite(ctx); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("TryAcquireWrite beside readers: %v; want ErrHeld", err)
	}
	mustRelease(t, ctx, r1)
	mustRelease(t, ctx, r2)
	w, err := c.RWMutex(key).AcquireWrite(ctx, fence.WithWait(s.cfg.TTL+s.slack()))
	if err != nil {
		t.Fatalf("AcquireWrite after the readers left: %v", err)
	}
	if w.Token() <= max(r1.Token(), r2.Token()) {
		t.Errorf("writer's token %d not greater than the earlier readers' %d, %d", w.Token(), r1.Token(), r2.Token())
	}
	if _, err := a.RWMutex(key).TryAcquireRead(ctx); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("TryAcquireRead beside a writer: %v; want ErrHeld", err)
	}
	if _, err := b.RWMutex(key).TryAcquireWrite(ctx); !errors.Is(err, fence.ErrHeld) {
		t.Errorf("second writer: %v; want ErrHeld", err)
	}
	mustRelease(t, ctx, w)

	// A stream of overlapping readers does not starve a waiting writer:
	// each reader takes its next read lease before it lets go of the
	// current one, so without writer preference a reader would always be
	// in.
	stop := make(chan struct{})
	var readers, readersStarted sync.WaitGroup
	for _, rc := range []*fence.Client{a, b} {
		readersStarted.Add(1)
		readers.Go(func() {
			rw := rc.RWMutex(key)
			cur, err := rw.AcquireRead(ctx, fence.WithWait(10*s.slack()))
			readersStarted.Done()
			if err != nil {
				t.Errorf("reader: %v", err)
				return
			}
			for {
				select {
				case <-stop:
					mustRelease(t, ctx, cur)
					return
				case <-time.After(s.cfg.TTL / 10):
				}
				next, err := rw.TryAcquireRead(ctx)
				mustRelease(t, ctx, cur)
				if errors.Is(err, fence.ErrHeld) { // a writer waits: let it in
					next, err = rw.AcquireRead(ctx, fence.WithWait(10*s.slack()))
				}
				if err != nil {
					t.Errorf("reader: %v", err)
					return
				}
				cur = next
			}
		})
	}
	readersStarted.Wait()
	start := time.Now()
	w, err = c.RWMutex(key).AcquireWrite(ctx, fence.WithWait(4*s.slack()))
	if err != nil {
		t.Errorf("writer starved by a stream of readers: %v after %v", err, time.Since(start))
	} else {
		t.Logf("writer waited %v behind a stream of readers", time.Since(start))
		mustRelease(t, ctx, w)
	}
	close(stop)
	readers.Wait()

	// Never a writer beside anyone; tokens in real-time order.
	var (
		readersIn, writersIn atomic.Int32
		violations           atomic.Int32
		g                    grants
		wg                   sync.WaitGroup
	)
	for i := range 6 {
		cl := s.client(t)
		write := i%3 == 0
		wg.Go(func() {
			for range 4 {
				invoked := time.Now()
				var l *fence.Lease
				var err error
				if write {
					l, err = cl.RWMutex(key).AcquireWrite(ctx)
				} else {
					l, err = cl.RWMutex(key).AcquireRead(ctx)
				}
				if err != nil {
					t.Errorf("Acquire: %v", err)
					return
				}
				if write {
					g.add(invoked, l, fence.KindWrite)
					if writersIn.Add(1) > 1 || readersIn.Load() > 0 {
						violations.Add(1)
					}
				} else {
					g.add(invoked, l, fence.KindRead)
					if readersIn.Add(1); writersIn.Load() > 0 {
						violations.Add(1)
					}
				}
				time.Sleep(2 * time.Millisecond)
				if write {
					writersIn.Add(-1)
				} else {
					readersIn.Add(-1)
				}
				mustRelease(t, ctx, l)
			}
		})
	}
	wg.Wait()
	if v := violations.Load(); v > 0 {
		t.Errorf("a writer held beside another holder %d times", v)
	}
	g.checkOrder(t)
}
