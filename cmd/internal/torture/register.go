package torture

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencehttp"
)

// The fenced register is the resource the workers protect: one value per
// key, written with the writer's fencing token. Guarded, it keeps the
// rule of docs/design.md section 1: a write is accepted iff its token is not
// lower than the highest accepted before. Unguarded (--no-guard), every
// write is accepted, which is what a resource without fencing does.
//
// Every register keeps its own log of the writes it applied and refused,
// in the order it did so: the resource's own view, against which
// "stale writes accepted" is counted.

// Applied is one write as the register saw it.
type Applied struct {
	T        int64  // Now() when it was applied or refused
	Key      string // the register's key (resource)
	Token    int64
	Val      string
	Accepted bool
	// Stale: the token was lower than the highest accepted before it.
	Stale bool
	// Highest is the highest token accepted before it.
	Highest int64
}

// registerClient is a worker's connection to the register.
type registerClient interface {
	// Write writes val with token; ResOK, ResStale, or ResUnknown with
	// the error.
	Write(ctx context.Context, key string, token int64, val string) (string, error)
	// Read returns the register's token and value.
	Read(ctx context.Context, key string) (int64, string, error)
	Close()
}

// registerServer is the parent's side of a register.
type registerServer interface {
	// Addr is the host:port workers reach it at (through their proxies).
	Addr() string
	// ClientURL is what a worker opens, with addr in place of Addr.
	ClientURL(addr string) string
	// Log returns the writes applied and refused so far, in order.
	Log(ctx context.Context) ([]Applied, error)
	Close() error
}

// memRegister is a register held in the parent process and served over
// HTTP. Guarded, writes pass the fencehttp middleware with a
// fence.MemoryGuard: a request carries its token in the Fencing-Token
// header and a stale one gets 409 Conflict.
type memRegister struct {
	noGuard bool
	guard   fence.MemoryGuard

	mu    sync.Mutex
	state map[string]regValue
	high  map[string]int64 // highest accepted token per key
	log   []Applied

	ln      net.Listener
	srv     *http.Server
	guarded http.Handler // the write behind the fencehttp middleware
}

type regValue struct {
	Token int64  `json:"token"`
	Val   string `json:"val"`
}

func newMemRegister(noGuard bool) (*memRegister, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	r := &memRegister{noGuard: noGuard, state: map[string]regValue{}, high: map[string]int64{}, ln: ln}
	r.guarded = fencehttp.Middleware(&r.guard, func(req *http.Request) string { return req.URL.Query().Get("key") })(
		http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			token, _ := fencehttp.ParseToken(req.Header)
			r.apply(req.URL.Query().Get("key"), token, req.URL.Query().Get("val"), true)
			w.WriteHeader(http.StatusNoContent)
		}))
	mux := http.NewServeMux()
	mux.HandleFunc("POST /write", r.handleWrite)
	mux.HandleFunc("GET /read", r.handleRead)
	r.srv = &http.Server{Handler: mux, ReadHeaderTimeout: time.Minute}
	go func() { _ = r.srv.Serve(ln) }()
	return r, nil
}

func (r *memRegister) Addr() string { return r.ln.Addr().String() }

func (r *memRegister) ClientURL(addr string) string { return "http://" + addr }

func (r *memRegister) Close() error { return r.srv.Close() }

func (r *memRegister) Log(context.Context) ([]Applied, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Applied(nil), r.log...), nil
}

// apply records a write; with accepted, it becomes the value.
func (r *memRegister) apply(key string, token int64, val string, accepted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := Applied{T: Now(), Key: key, Token: token, Val: val, Accepted: accepted, Stale: token < r.high[key], Highest: r.high[key]}
	r.log = append(r.log, a)
	if accepted {
		r.state[key] = regValue{Token: token, Val: val}
		r.high[key] = max(r.high[key], token)
	}
}

func (r *memRegister) handleWrite(w http.ResponseWriter, req *http.Request) {
	key, val := req.URL.Query().Get("key"), req.URL.Query().Get("val")
	token, err := fencehttp.ParseToken(req.Header)
	if err != nil || key == "" {
		http.Error(w, "need key, val and a "+fencehttp.Header+" header", http.StatusBadRequest)
		return
	}
	if r.noGuard {
		r.apply(key, token, val, true)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	// Guarded: the fencehttp middleware admits the token with the
	// MemoryGuard (409 Conflict if stale) and runs the handlers of one
	// key one at a time.
	rec := &statusRecorder{ResponseWriter: w}
	r.guarded.ServeHTTP(rec, req)
	if rec.status == http.StatusConflict {
		r.apply(key, token, val, false)
	}
}

// statusRecorder remembers the status a handler answered.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

func (r *memRegister) handleRead(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	v := r.state[req.URL.Query().Get("key")]
	r.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// httpRegisterClient writes to a memRegister.
type httpRegisterClient struct {
	base string
	hc   *http.Client
}

func newHTTPRegisterClient(base string) *httpRegisterClient {
	return &httpRegisterClient{base: base, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
}

func (c *httpRegisterClient) Close() { c.hc.CloseIdleConnections() }

func (c *httpRegisterClient) Write(ctx context.Context, key string, token int64, val string) (string, error) {
	u := c.base + "/write?" + url.Values{"key": {key}, "val": {val}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, nil)
	if err != nil {
		return ResUnknown, err
	}
	req.Header.Set(fencehttp.Header, strconv.FormatInt(token, 10))
	resp, err := c.hc.Do(req)
	if err != nil {
		return ResUnknown, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	switch resp.StatusCode {
	case http.StatusNoContent, http.StatusOK:
		return ResOK, nil
	case http.StatusConflict:
		return ResStale, nil
	}
	return ResUnknown, fmt.Errorf("register: %s: %s", resp.Status, body)
}

func (c *httpRegisterClient) Read(ctx context.Context, key string) (int64, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/read?"+url.Values{"key": {key}}.Encode(), nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, "", fmt.Errorf("register: %s", resp.Status)
	}
	var v regValue
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return 0, "", err
	}
	return v.Token, v.Val, nil
}
