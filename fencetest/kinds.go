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
	if l, err := extra.Semaphore(key, limit).TryAcquire(ctx); err == nil {
		t.Errorf("TryAcquire on a full semaphore of %d granted one more, with token %d", limit, l.Token())
		mustRelease(t, ctx, l)
	} else if !errors.Is(err, fence.ErrHeld) {
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

// rwWriterPreference checks that a waiting writer keeps new readers out,
// so that a stream of readers cannot starve it: once a writer waits
// behind a reader, a new reader's try is refused, and a reader that then
// waits gets in only after the writer.
func (s *suite) rwWriterPreference(t *testing.T) {
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
	type result struct {
		l   *fence.Lease
		err error
		at  time.Time
	}
	writer := make(chan result, 1)
	go func() {
		l, err := c.RWMutex(key).AcquireWrite(ctx, fence.WithWait(10*s.slack()))
		writer <- result{l, err, time.Now()}
	}()
	// Readers that come while the writer waits are kept out, once the
	// writer's wait has reached the store. Two refusals a little apart
	// show it there for good: a writer's first try, before it queues in a
	// blocking store, keeps readers out only for that instant.
	start := time.Now()
	var refused time.Time
	for {
		l, err := b.RWMutex(key).TryAcquireRead(ctx)
		if errors.Is(err, fence.ErrHeld) {
			if refused.IsZero() {
				refused = time.Now()
			} else if time.Since(refused) >= s.cfg.TTL/10 {
				break
			}
		} else if err != nil {
			t.Fatalf("TryAcquireRead: %v", err)
		} else {
			refused = time.Time{}
			mustRelease(t, ctx, l)
		}
		if time.Since(start) > s.slack() {
			mustRelease(t, ctx, r1)
			t.Fatalf("new readers still get in %v after a writer began to wait: a waiting writer must keep them out, or a stream of readers starves it",
				time.Since(start).Round(time.Millisecond))
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("new readers kept out %v after the writer began to wait", time.Since(start).Round(time.Millisecond))
	reader := make(chan result, 1)
	go func() {
		l, err := b.RWMutex(key).AcquireRead(ctx, fence.WithWait(10*s.slack()))
		reader <- result{l, err, time.Now()}
	}()
	time.Sleep(s.cfg.TTL / 10) // the reader waits too
	mustRelease(t, ctx, r1)
	var w result
	select {
	case w = <-writer:
		if w.err != nil {
			t.Fatalf("waiting writer: %v", w.err)
		}
	case r := <-reader:
		if r.l != nil {
			mustRelease(t, ctx, r.l)
		}
		t.Fatalf("a reader that came after the waiting writer got in first (%v)", r.err)
	case <-time.After(s.slack()):
		t.Fatalf("the waiting writer did not get the key within %v of the last reader's release", s.slack())
	}
	if w.l.Token() <= r1.Token() {
		t.Errorf("writer's token %d is not greater than the earlier reader's %d", w.l.Token(), r1.Token())
	}
	select {
	case r := <-reader:
		t.Errorf("a reader got in beside the writer (%v)", r.err)
		if r.l != nil {
			mustRelease(t, ctx, r.l)
		}
	case <-time.After(s.cfg.TTL / 4):
	}
	mustRelease(t, ctx, w.l)
	select {
	case r := <-reader:
		if r.err != nil {
			t.Fatalf("reader behind the writer: %v", r.err)
		}
		if r.l.Token() <= w.l.Token() {
			t.Errorf("reader's token %d is not greater than the writer's %d before it", r.l.Token(), w.l.Token())
		}
		mustRelease(t, ctx, r.l)
	case <-time.After(s.slack()):
		t.Fatalf("the reader behind the writer did not get in within %v of the writer's release", s.slack())
	}
}

// kindsSeparate checks that a lock, a semaphore and a reader-writer lock
// of one key are separate namespaces: none blocks another, each still
// excludes its own, and Inspect and List name the lock only.
func (s *suite) kindsSeparate(t *testing.T) {
	ctx := s.ctx(t)
	a, b := s.client(t), s.client(t)
	ks := kinds(a.Driver())
	if len(ks) == 1 {
		t.Skip("driver supports locks only")
	}
	key := s.key(t, "k")
	var held []*fence.Lease
	var lock *fence.Lease
	for _, k := range ks {
		if k == fence.KindRead {
			continue // the writer stands for the reader-writer lock
		}
		l, err := acquireKind(ctx, a, key, k, false)
		if err != nil {
			t.Errorf("%s of a key held in other kinds: %v; each kind is a namespace of its own", k, err)
			continue
		}
		if k == fence.KindLock {
			lock = l
		}
		held = append(held, l)
	}
	for _, k := range ks {
		if _, err := acquireKind(ctx, b, key, k, false); !errors.Is(err, fence.ErrHeld) {
			t.Errorf("%s of a key held in every kind: %v; want ErrHeld", k, err)
		}
	}
	if lock != nil {
		if _, ok := a.Driver().(fence.Inspector); ok {
			if h, err := a.Inspect(ctx, key); err != nil || h.Token != lock.Token() {
				t.Errorf("Inspect of a key held in every kind = token %d, %v; want the lock's token %d", h.Token, err, lock.Token())
			}
		}
		if _, ok := a.Driver().(fence.Lister); ok {
			hs, err := a.List(ctx, key)
			if err != nil || len(hs) != 1 || hs[0].Token != lock.Token() {
				t.Errorf("List of a key held in every kind = %+v, %v; want the lock only", hs, err)
			}
		}
	}
	for _, l := range held {
		mustRelease(t, ctx, l)
	}
}
