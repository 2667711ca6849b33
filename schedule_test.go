package fence

import (
	"container/heap"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// add schedules f to run at at.
func (s *schedule) add(at time.Time, f func()) *event {
	e := &event{f: f, index: -1}
	s.put(e, at)
	return e
}

// move makes e run at at instead. It reports false if e already ran or
// was removed.
func (s *schedule) move(e *event, at time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.index < 0 {
		return false
	}
	e.at = at
	heap.Fix(s.queueOf(e), e.index)
	s.armLocked()
	return true
}

// remove unschedules e. It reports false if e already ran (or is about
// to) or was removed.
func (s *schedule) remove(e *event) bool {
	if e == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e.index < 0 {
		return false
	}
	heap.Remove(s.queueOf(e), e.index)
	return true
}

func TestScheduleRunsDeadlinesInOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s schedule
		var mu sync.Mutex
		var got []int
		done := make(chan struct{}, 4)
		run := func(i int) func() {
			return func() {
				mu.Lock()
				got = append(got, i)
				mu.Unlock()
				done <- struct{}{}
			}
		}
		now := time.Now()
		s.add(now.Add(60*time.Millisecond), run(3))
		s.add(now.Add(20*time.Millisecond), run(1))
		removed := s.add(now.Add(30*time.Millisecond), run(99))
		moved := s.add(now.Add(time.Hour), run(2))
		if !s.remove(removed) {
			t.Fatal("remove of a pending deadline reported false")
		}
		if s.remove(removed) {
			t.Fatal("second remove reported true")
		}
		if !s.move(moved, now.Add(40*time.Millisecond)) {
			t.Fatal("move of a pending deadline reported false")
		}
		for range 3 {
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("deadlines did not run")
			}
			synctest.Wait() // each runs on its own goroutine
		}
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 3 || got[0] != 1 || got[1] != 2 || got[2] != 3 {
			t.Fatalf("ran %v, want [1 2 3]", got)
		}
		if s.move(moved, now.Add(time.Hour)) || s.remove(moved) {
			t.Fatal("move or remove of a deadline that ran reported true")
		}
	})
}

// A deadline later than the armed one does not touch the timer; one
// earlier re-arms it.
func TestScheduleArmsOnlyForEarlierDeadlines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s schedule
		armedAt := func() time.Time {
			s.mu.Lock()
			defer s.mu.Unlock()
			return s.armed
		}
		now := time.Now()
		a := s.add(now.Add(time.Hour), func() {})
		armed := armedAt()
		b := s.add(now.Add(2*time.Hour), func() {})
		if got := armedAt(); !got.Equal(armed) {
			t.Fatalf("a later deadline re-armed the timer: %v -> %v", armed, got)
		}
		ran := make(chan struct{})
		s.add(now.Add(10*time.Millisecond), func() { close(ran) })
		if got := armedAt(); !got.IsZero() && !got.Before(armed) {
			t.Fatal("an earlier deadline did not re-arm the timer")
		}
		select {
		case <-ran:
		case <-time.After(5 * time.Second):
			t.Fatal("the earlier deadline did not run")
		}
		s.remove(a)
		s.remove(b)
		s.mu.Lock()
		s.timer.Stop()
		s.mu.Unlock()
	})
}
