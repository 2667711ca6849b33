package lossnote

import (
	"errors"
	"sync"
	"testing"
)

func TestReportedBeforeRegistering(t *testing.T) {
	n := New()
	gone := errors.New("gone")
	n.Report(gone)
	n.Report(errors.New("again"))
	var got []error
	n.NotifyLost(func(err error) { got = append(got, err) })
	if len(got) != 1 || got[0] != gone {
		t.Fatalf("NotifyLost after a report got %v; want [%v]", got, gone)
	}
}

func TestReportedAfterRegistering(t *testing.T) {
	n := New()
	gone := errors.New("gone")
	var got []error
	n.NotifyLost(func(err error) { got = append(got, err) })
	if len(got) != 0 {
		t.Fatalf("called before any report: %v", got)
	}
	n.Report(gone)
	n.Report(errors.New("again"))
	if len(got) != 1 || got[0] != gone {
		t.Fatalf("got %v; want [%v]", got, gone)
	}
}

// Reported while the function is being registered, the loss reaches the
// function exactly once.
func TestRace(t *testing.T) {
	for range 1000 {
		n := New()
		var (
			mu    sync.Mutex
			calls int
			wg    sync.WaitGroup
		)
		wg.Go(func() { n.Report(errors.New("gone")) })
		wg.Go(func() { n.Report(errors.New("gone too")) })
		wg.Go(func() {
			n.NotifyLost(func(error) {
				mu.Lock()
				calls++
				mu.Unlock()
			})
		})
		wg.Wait()
		if calls != 1 {
			t.Fatalf("function called %d times; want 1", calls)
		}
	}
}
