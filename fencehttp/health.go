package fencehttp

import (
	"io"
	"net/http"
	"time"

	"github.com/fencing/fence"
)

// ElectionHealth returns a handler for a liveness probe of a process that
// campaigns in e: it answers 200 OK while e.Healthy(grace) is nil, and 503
// Service Unavailable, with the reason, while this process still leads
// although its term's lease is no longer valid, for grace or longer (its
// work did not stop when fence ended the leadership's context). A
// follower is healthy. See fence.Election.Healthy for the exact rule;
// like client-go's leader election health check, it asks nothing of the
// store.
func ElectionHealth(e *fence.Election, grace time.Duration) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := e.Healthy(grace); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	})
}
