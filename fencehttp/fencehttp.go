// Package fencehttp carries fencing tokens over HTTP: a server middleware
// that admits a request only if its Fencing-Token header is not stale for
// the resource it writes, and a client RoundTripper that sends the
// current lease's token with every request.
//
// Server side:
//
//	guard := &fence.MemoryGuard{}          // or fencesql / fencepg guards
//	resource := func(r *http.Request) string { return r.URL.Path }
//	http.Handle("/docs/", fencehttp.Middleware(guard, resource)(docsHandler))
//
// A request without the header, or with a token that is not a positive
// integer, is answered 400 Bad Request; one whose token is lower than the
// highest the guard has admitted for the resource (or not higher, for a
// strict guard) is answered 409 Conflict, and the handler does not run.
//
// Client side:
//
//	client := &http.Client{Transport: fencehttp.ForLease(nil, lease)}
//
// The check and the handler's write are atomic only as far as the guard
// and the handler make them: the middleware runs the handlers of one
// resource one at a time in this process, which is enough for a single
// server with a MemoryGuard. With several server processes, use a guard in
// the store the handler writes to, inside the handler's transaction
// (fencesql, fencepg), rather than this middleware. See docs/guards.md.
//
// ElectionHealth serves a fence.Election's health check (Healthy) to a
// liveness probe.
package fencehttp

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/fencing/fence"
)

// Header is the request header that carries the fencing token.
const Header = "Fencing-Token"

// HighestHeader is set on a 409 answer to the highest token the guard has
// admitted for the resource, where the guard tells.
const HighestHeader = "Fencing-Token-Highest"

// Option configures the Middleware.
type Option func(*options)

type options struct {
	concurrent bool
}

// Concurrent lets the handlers of one resource run at the same time. By
// default the middleware runs them one at a time, so that a lower token
// admitted before a higher one cannot finish its write after it. Use it
// when the handler's write itself is guarded (in its transaction).
func Concurrent() Option { return func(o *options) { o.concurrent = true } }

// Middleware returns middleware that admits a request only if guard
// admits its Fencing-Token for the resource named by resource(r). An
// empty resource name is a bad request.
func Middleware(guard fence.Guard, resource func(*http.Request) string, opts ...Option) func(http.Handler) http.Handler {
	if guard == nil || resource == nil {
		panic("fencehttp: Middleware needs a guard and a resource function")
	}
	var o options
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	locks := &keyedMutex{m: make(map[string]*refMutex)}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, err := ParseToken(r.Header)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			name := resource(r)
			if name == "" {
				http.Error(w, "fencehttp: the request names no resource to guard", http.StatusBadRequest)
				return
			}
			if !o.concurrent {
				unlock := locks.lock(name)
				defer unlock()
			}
			err = guard.Admit(r.Context(), name, token)
			var stale *fence.StaleError
			switch {
			case err == nil:
				next.ServeHTTP(w, r)
			case errors.As(err, &stale):
				if stale.Highest > 0 {
					w.Header().Set(HighestHeader, strconv.FormatInt(stale.Highest, 10))
				}
				http.Error(w, fmt.Sprintf("stale fencing token: %d for %q has been superseded%s; "+
					"the lease that issued it is no longer valid, acquire the lock again",
					token, name, highestText(stale)), http.StatusConflict)
			case errors.Is(err, fence.ErrInvalidToken):
				http.Error(w, err.Error(), http.StatusBadRequest)
			default:
				http.Error(w, "fencehttp: the fencing guard is unavailable", http.StatusServiceUnavailable)
			}
		})
	}
}

func highestText(s *fence.StaleError) string {
	if s.Highest <= 0 {
		return ""
	}
	return fmt.Sprintf(" (highest admitted: %d)", s.Highest)
}

// ParseToken reads the Fencing-Token header. Its errors say what is wrong:
// a missing header, or a value that is not a positive 64-bit integer.
func ParseToken(h http.Header) (int64, error) {
	vals := h.Values(Header)
	switch {
	case len(vals) == 0:
		return 0, fmt.Errorf("missing %s header: send the fencing token of the lease under which you write", Header)
	case len(vals) > 1:
		return 0, fmt.Errorf("%d %s headers: send exactly one", len(vals), Header)
	}
	v := strings.TrimSpace(vals[0])
	token, err := strconv.ParseInt(v, 10, 64)
	if err != nil || token <= 0 || v[0] == '+' {
		return 0, fmt.Errorf("malformed %s header %.40q: want a positive integer", Header, v)
	}
	return token, nil
}

// keyedMutex is a mutex per resource name, freed when unused.
type keyedMutex struct {
	mu sync.Mutex
	m  map[string]*refMutex
}

type refMutex struct {
	sync.Mutex
	refs int
}

func (k *keyedMutex) lock(name string) (unlock func()) {
	k.mu.Lock()
	rm := k.m[name]
	if rm == nil {
		rm = &refMutex{}
		k.m[name] = rm
	}
	rm.refs++
	k.mu.Unlock()
	rm.Lock()
	return func() {
		rm.Unlock()
		k.mu.Lock()
		if rm.refs--; rm.refs == 0 {
			delete(k.m, name)
		}
		k.mu.Unlock()
	}
}

// TokenFunc returns the fencing token to send with r, or an error to send
// nothing.
type TokenFunc func(r *http.Request) (int64, error)

// LeaseToken returns a TokenFunc that gives lease's token while the lease
// is held, and the lease's error (fence.ErrLost, fence.ErrReleased) once
// it is not, so that a request is not even sent under a lost lease.
func LeaseToken(lease *fence.Lease) TokenFunc {
	return func(*http.Request) (int64, error) {
		if err := lease.Err(); err != nil {
			return 0, err
		}
		return lease.Token(), nil
	}
}

// Transport is an http.RoundTripper that adds the Fencing-Token header to
// every request it sends.
type Transport struct {
	// Base sends the requests; nil means http.DefaultTransport.
	Base http.RoundTripper
	// Token gives the token for each request. Required.
	Token TokenFunc
}

// ForLease returns a Transport over base that sends lease's token.
func ForLease(base http.RoundTripper, lease *fence.Lease) *Transport {
	return &Transport{Base: base, Token: LeaseToken(lease)}
}

// RoundTrip implements http.RoundTripper. It does not modify req.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	token, err := t.Token(req)
	if err == nil && token <= 0 {
		err = fmt.Errorf("%w: %d", fence.ErrInvalidToken, token)
	}
	if err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("fencehttp: no fencing token for %s %s: %w", req.Method, req.URL.Redacted(), err)
	}
	r := req.Clone(req.Context())
	r.Header.Set(Header, strconv.FormatInt(token, 10))
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	return base.RoundTrip(r)
}

// CheckResponse returns a *fence.StaleError (matching fence.ErrStale) if
// resp is the middleware's 409 answer to a stale token sent in req, and
// nil otherwise.
func CheckResponse(resp *http.Response) error {
	if resp.StatusCode != http.StatusConflict {
		return nil
	}
	token, err := ParseToken(resp.Request.Header)
	if err != nil {
		return nil
	}
	stale := &fence.StaleError{Resource: resp.Request.URL.Path, Token: token}
	stale.Highest, _ = strconv.ParseInt(resp.Header.Get(HighestHeader), 10, 64)
	return stale
}
