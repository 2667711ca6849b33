package cancelwait

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testkit/leakcheck"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// server is a fake blocking call: wait blocks until a cancel gets
// through, which happens only on the lost-th call (the first ones reach
// it before the wait started) or on a hard cancel.
type server struct {
	lost  int
	calls atomic.Int32
	hard  atomic.Bool
	once  sync.Once
	end   chan struct{}
}

func newServer(lost int) *server { return &server{lost: lost, end: make(chan struct{})} }

func (s *server) cancel(ctx context.Context, hard bool) {
	if ctx.Err() != nil {
		panic("cancel called with an ended context")
	}
	if n := s.calls.Add(1); int(n) > s.lost || hard {
		s.hard.Store(hard)
		s.once.Do(func() { close(s.end) })
	}
}

func (s *server) wait() error {
	<-s.end
	return errors.New("cancelled by the server")
}

func TestGrantedWaitCallsNoCancel(t *testing.T) {
	s := newServer(0)
	close(s.end)
	err := Run(context.Background(), s.cancel, func() error { <-s.end; return nil })
	if err != nil || s.calls.Load() != 0 {
		t.Errorf("Run = %v after %d cancels; want nil after none", err, s.calls.Load())
	}
}

func TestCancelEndsTheWaitPromptly(t *testing.T) {
	s := newServer(2) // two cancels arrive too early
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := Run(ctx, s.cancel, s.wait)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run = %v; want the context's error", err)
	}
	if d := time.Since(start); d > 50*time.Millisecond+3*every+time.Second {
		t.Errorf("Run took %v", d)
	}
	if n := s.calls.Load(); n != 3 || s.hard.Load() {
		t.Errorf("%d cancels (hard %v); want 3 soft ones", n, s.hard.Load())
	}
}

func TestCancelTurnsHard(t *testing.T) {
	defer func(g time.Duration) { grace = g }(grace)
	grace = 300 * time.Millisecond
	s := newServer(1 << 20) // soft cancels never get through
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Run(ctx, s.cancel, s.wait)
	if !errors.Is(err, context.Canceled) || !s.hard.Load() {
		t.Errorf("Run = %v, hard %v; want the context's error after a hard cancel", err, s.hard.Load())
	}
}

// A wait that returns just as its context ends still reports the
// context's error when the canceller ran, and Run waits for the
// canceller: nothing runs after Run returns.
func TestNoCancelAfterReturn(t *testing.T) {
	for range 200 {
		s := newServer(0)
		ctx, cancel := context.WithCancel(context.Background())
		go cancel()
		err := Run(ctx, s.cancel, func() error { return nil })
		n := s.calls.Load()
		time.Sleep(time.Millisecond)
		if s.calls.Load() != n {
			t.Fatal("cancel called after Run returned")
		}
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Run = %v", err)
		}
		cancel()
	}
}
