package fencehttp_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencehttp"
)

// inside counts the handlers running at once and remembers the most.
type inside struct {
	mu       sync.Mutex
	now, max int
}

func (in *inside) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in.mu.Lock()
	in.now++
	in.max = max(in.max, in.now)
	in.mu.Unlock()
	time.Sleep(50 * time.Millisecond) // long enough for the other request to come in
	in.mu.Lock()
	in.now--
	in.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// maxInside sends two requests for one resource at once, with the same
// token, and returns how many of their handlers ran at the same time.
func maxInside(t *testing.T, opts ...fencehttp.Option) int {
	in := &inside{}
	h := fencehttp.Middleware(&fence.MemoryGuard{}, func(*http.Request) string { return "doc" }, opts...)(in)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			req := httptest.NewRequest(http.MethodPut, "/doc", nil)
			req.Header.Set(fencehttp.Header, strconv.Itoa(7))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != http.StatusNoContent {
				t.Errorf("status %d: %s", rec.Code, rec.Body)
			}
		})
	}
	wg.Wait()
	return in.max
}

// By default the handlers of one resource run one at a time; Concurrent
// lets them overlap.
func TestConcurrent(t *testing.T) {
	if n := maxInside(t); n != 1 {
		t.Errorf("default: %d handlers of one resource at once; want 1", n)
	}
	// The second request arrives within the first's 50 ms almost always;
	// a few tries make the test immune to a slow scheduler.
	for try := 1; ; try++ {
		n := maxInside(t, fencehttp.Concurrent())
		if n == 2 {
			break
		}
		if try == 5 {
			t.Fatalf("Concurrent: handlers never overlapped in %d tries; want 2 at once", try)
		}
	}
}
