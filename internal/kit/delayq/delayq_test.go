package delayq

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestRunsAfterTheDelayUnlessCancelledOrStarted(t *testing.T) {
	q := New(30 * time.Millisecond)
	defer q.Close()
	var ran, cancelledRan, startedRan atomic.Int32
	added := time.Now()
	done := make(chan time.Duration, 1)
	q.Add(func() { ran.Add(1); done <- time.Since(added) })
	c := q.Add(func() { cancelledRan.Add(1) })
	s := q.Add(func() { startedRan.Add(1) })
	if c.Cancel() {
		t.Error("Cancel of a pending item reported that it ran")
	}
	s.Start()
	if startedRan.Load() != 1 {
		t.Fatal("Start did not run the function at once")
	}
	s.Start()
	select {
	case d := <-done:
		if d < 30*time.Millisecond {
			t.Errorf("ran after %v, before the delay", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the item did not run")
	}
	time.Sleep(50 * time.Millisecond)
	if ran.Load() != 1 || cancelledRan.Load() != 0 || startedRan.Load() != 1 {
		t.Errorf("ran %d, cancelled ran %d, started ran %d; want 1, 0, 1", ran.Load(), cancelledRan.Load(), startedRan.Load())
	}
	if !s.Cancel() {
		t.Error("Cancel of a started item reported that it had not run")
	}
}

// Items added while others wait run in order, each after its own delay.
func TestItemsAddedLaterRunLater(t *testing.T) {
	q := New(20 * time.Millisecond)
	defer q.Close()
	order := make(chan int, 3)
	for i := range 3 {
		q.Add(func() { order <- i })
		time.Sleep(10 * time.Millisecond)
	}
	for want := range 3 {
		select {
		case got := <-order:
			if got != want {
				t.Fatalf("item %d ran in place %d", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("items did not run")
		}
	}
}

func TestCloseCancelsPending(t *testing.T) {
	q := New(10 * time.Millisecond)
	var ran atomic.Bool
	it := q.Add(func() { ran.Store(true) })
	q.Close()
	time.Sleep(30 * time.Millisecond)
	if ran.Load() || it.Cancel() {
		t.Error("an item ran after Close")
	}
	if q.Add(func() { ran.Store(true) }).Cancel() || ran.Load() {
		t.Error("an item added after Close ran")
	}
}
