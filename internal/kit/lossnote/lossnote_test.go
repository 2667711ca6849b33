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
	if err := <-n.Lost(); err != gone {
		t.Fatalf("Lost: %v; want %v", err, gone)
	}
	n.Report(gone)
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
	n.Report(gone)
	if len(got) != 1 || got[0] != gone {
		t.Fatalf("got %v; want [%v]", got, gone)
	}
	select {
	case err := <-n.Lost():
		t.Fatalf("the loss also went to Lost: %v", err)
	default:
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
