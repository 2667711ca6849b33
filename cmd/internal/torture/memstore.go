package torture

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/cmd/internal/storeurl"
	"github.com/fencing/fence/fencemem"
)

// The "mem" store of the torture tool: a fencemem.Store in the parent
// process, served over HTTP to the worker processes. fencemem itself lives
// in one process; serving it gives the tool a store with real TTL leases
// and a network hop (so every fault applies) that needs no server program.
// It is the tool's own and not a fence store: the scheme is registered by
// this package only.

// MemScheme is the store URL scheme of the served memory store:
// torturemem://127.0.0.1:port.
const MemScheme = "torturemem"

func init() {
	storeurl.Register(MemScheme, openMemClient, MemScheme+"://host:port (the torture tool's served memory store)")
}

type memServer struct {
	store atomic.Pointer[fencemem.Store]
	ln    net.Listener
	srv   *http.Server
	// forgetTokens makes wipe start the store over, its tokens with it:
	// a deliberately broken store, for the test that shows the checks
	// catch tokens that go back.
	forgetTokens bool
	// semaphoreOneMore grants every semaphore one slot more than asked,
	// and writerShares grants a writer the read side, beside readers and
	// other writers: deliberately broken stores, for the tests that show
	// the semaphore and reader-writer plans catch too many holders.
	semaphoreOneMore, writerShares bool

	mu     sync.Mutex
	claims map[string]memClaimed // by owner
}

// memClaimed is a claim the server granted, with its kind: a wipe deletes
// locks through fencemem, and other kinds through their claims.
type memClaimed struct {
	fence.Claim
	kind fence.Kind
}

type memRequest struct {
	Key   string            `json:"key"`
	Owner string            `json:"owner"`
	TTL   time.Duration     `json:"ttl"`
	Meta  map[string]string `json:"meta,omitempty"`
	Kind  fence.Kind        `json:"kind,omitempty"`
	Limit int               `json:"limit,omitempty"`
}

type memReply struct {
	Token     int64         `json:"token,omitempty"`
	Owner     string        `json:"owner,omitempty"`
	ExpiresIn time.Duration `json:"expires_in,omitempty"`
	Error     string        `json:"error,omitempty"`
}

func newMemServer() (*memServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &memServer{ln: ln, claims: map[string]memClaimed{}}
	s.store.Store(fencemem.New())
	mux := http.NewServeMux()
	mux.HandleFunc("POST /acquire", s.handle(s.acquire))
	mux.HandleFunc("POST /extend", s.handle(s.extend))
	mux.HandleFunc("POST /release", s.handle(s.release))
	mux.HandleFunc("POST /watch", s.handle(s.watch))
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: time.Minute}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *memServer) Addr() string { return s.ln.Addr().String() }

func (s *memServer) Close() error { return s.srv.Close() }

func (s *memServer) handle(op func(context.Context, memRequest) (int, memReply)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req memRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		code, reply := op(r.Context(), req)
		if code == http.StatusNoContent {
			w.WriteHeader(code)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(reply)
	}
}

func (s *memServer) acquire(ctx context.Context, req memRequest) (int, memReply) {
	r := fence.Request{Key: req.Key, Owner: req.Owner, TTL: req.TTL, Meta: req.Meta, Kind: req.Kind, Limit: req.Limit}
	if s.semaphoreOneMore && r.Kind == fence.KindSemaphore {
		r.Limit++
	}
	if s.writerShares && r.Kind == fence.KindWrite {
		r.Kind = fence.KindRead
	}
	c, err := s.store.Load().TryAcquire(ctx, r)
	var held *fence.HeldError
	switch {
	case errors.As(err, &held):
		r := memReply{Error: err.Error()}
		if h := held.Holder; h != nil {
			r.Owner, r.Token, r.ExpiresIn = h.Owner, h.Token, h.ExpiresIn
		}
		return http.StatusConflict, r
	case err != nil:
		return http.StatusInternalServerError, memReply{Error: err.Error()}
	}
	s.mu.Lock()
	s.claims[req.Owner] = memClaimed{c, r.Kind}
	s.mu.Unlock()
	return http.StatusOK, memReply{Token: c.Token()}
}

func (s *memServer) claim(owner string) fence.Claim {
	s.mu.Lock()
	defer s.mu.Unlock()
	if c, ok := s.claims[owner]; ok {
		return c.Claim
	}
	return nil
}

func (s *memServer) extend(ctx context.Context, req memRequest) (int, memReply) {
	c := s.claim(req.Owner)
	if c == nil {
		return http.StatusGone, memReply{Error: "no such claim"}
	}
	if err := c.Extend(ctx, req.TTL); err != nil {
		return notHeldStatus(err), memReply{Error: err.Error()}
	}
	return http.StatusOK, memReply{}
}

func (s *memServer) release(ctx context.Context, req memRequest) (int, memReply) {
	c := s.claim(req.Owner)
	if c == nil {
		return http.StatusGone, memReply{Error: "no such claim"}
	}
	err := c.Release(ctx)
	if err == nil || errors.Is(err, fence.ErrNotHeld) {
		s.mu.Lock()
		delete(s.claims, req.Owner)
		s.mu.Unlock()
	}
	if err != nil {
		return notHeldStatus(err), memReply{Error: err.Error()}
	}
	return http.StatusOK, memReply{}
}

// watch answers 200 when key may have been released, 204 after a while
// without news: a long poll.
func (s *memServer) watch(ctx context.Context, req memRequest) (int, memReply) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ch, err := s.store.Load().Watch(ctx, req.Key)
	if err != nil {
		return http.StatusInternalServerError, memReply{Error: err.Error()}
	}
	select {
	case <-ch:
		return http.StatusOK, memReply{}
	case <-ctx.Done():
		return http.StatusNoContent, memReply{}
	}
}

// wipe removes every lease behind its holder's back (fencemem's Delete for
// locks; semaphore slots and reader-writer leases, which Delete does not
// reach, through the server's own claims, forgotten at once so that their
// holders' renewals are refused): the tokens stay, as a store that seeds
// them from its clock keeps them growing. With forgetTokens, the store
// starts over instead.
func (s *memServer) wipe(ctx context.Context) (string, error) {
	if s.forgetTokens {
		s.store.Store(fencemem.New())
		s.mu.Lock()
		clear(s.claims)
		s.mu.Unlock()
		return "started the store over, its tokens at 1 (deliberately broken)", nil
	}
	st := s.store.Load()
	hs, err := st.List(ctx, "")
	if err != nil {
		return "", err
	}
	for _, h := range hs {
		st.Delete(h.Key)
	}
	n := len(hs)
	s.mu.Lock()
	var others []fence.Claim
	for owner, c := range s.claims {
		if c.kind != fence.KindLock {
			others = append(others, c.Claim)
			delete(s.claims, owner)
		}
	}
	s.mu.Unlock()
	for _, c := range others {
		if c.Release(ctx) == nil {
			n++
		}
	}
	return fmt.Sprintf("deleted the %d leases", n), nil
}

func notHeldStatus(err error) int {
	if errors.Is(err, fence.ErrNotHeld) {
		return http.StatusGone
	}
	return http.StatusInternalServerError
}

// memClient is the driver the workers use for torturemem:// URLs.
type memClient struct {
	base string
	hc   *http.Client
}

func openMemClient(_ context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
	if u.Host == "" {
		return nil, nil, fmt.Errorf("%w: %s needs host:port", storeurl.ErrBadURL, MemScheme)
	}
	c := &memClient{base: "http://" + u.Host, hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	return c, c, nil
}

func (c *memClient) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

func (c *memClient) call(ctx context.Context, op string, req memRequest) (int, memReply, error) {
	body, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/"+op, bytes.NewReader(body))
	if err != nil {
		return 0, memReply{}, err
	}
	resp, err := c.hc.Do(hr)
	if err != nil {
		return 0, memReply{}, err
	}
	defer resp.Body.Close()
	var r memReply
	if resp.StatusCode == http.StatusNoContent {
		return resp.StatusCode, r, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return resp.StatusCode, r, fmt.Errorf("%s: %s: %w", op, resp.Status, err)
	}
	return resp.StatusCode, r, nil
}

// Supports implements fence.KindSupporter, as fencemem does.
func (c *memClient) Supports(k fence.Kind) bool { return k <= fence.KindWrite }

func (c *memClient) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	code, r, err := c.call(ctx, "acquire", memRequest{Key: req.Key, Owner: req.Owner, TTL: req.TTL, Meta: req.Meta, Kind: req.Kind, Limit: req.Limit})
	switch {
	case err != nil:
		return nil, err
	case code == http.StatusConflict:
		return nil, &fence.HeldError{Key: req.Key, Holder: &fence.Holder{Key: req.Key, Owner: r.Owner, Token: r.Token, ExpiresIn: r.ExpiresIn}}
	case code != http.StatusOK:
		return nil, fmt.Errorf("acquire: %d: %s", code, r.Error)
	}
	return &memClaim{c: c, key: req.Key, owner: req.Owner, token: r.Token}, nil
}

// Watch implements fence.Watcher with long polls. A release between
// Watch returning and the first poll reaching the server goes unseen; the
// Client then wakes at the holder's expiry or its poll bound instead.
func (c *memClient) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	ch := make(chan struct{}, 1)
	go func() {
		defer close(ch)
		for ctx.Err() == nil {
			code, _, err := c.call(ctx, "watch", memRequest{Key: key})
			switch {
			case err != nil:
				sleep(ctx, 50*time.Millisecond)
			case code == http.StatusOK:
				select {
				case ch <- struct{}{}:
				default:
				}
			}
		}
	}()
	return ch, nil
}

type memClaim struct {
	c     *memClient
	key   string
	owner string
	token int64
}

func (m *memClaim) Token() int64 { return m.token }

func (m *memClaim) Extend(ctx context.Context, ttl time.Duration) error {
	return m.do(ctx, "extend", ttl)
}

func (m *memClaim) Release(ctx context.Context) error { return m.do(ctx, "release", 0) }

func (m *memClaim) do(ctx context.Context, op string, ttl time.Duration) error {
	code, r, err := m.c.call(ctx, op, memRequest{Key: m.key, Owner: m.owner, TTL: ttl})
	switch {
	case err != nil:
		return err
	case code == http.StatusGone:
		return fmt.Errorf("%w: %s", fence.ErrNotHeld, r.Error)
	case code != http.StatusOK:
		return fmt.Errorf("%s: %d: %s", op, code, r.Error)
	}
	return nil
}
