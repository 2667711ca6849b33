package fencehttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testkit/leakcheck"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencehttp"
	"github.com/fencing/fence/fencemem"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m) }

// docStore is the protected resource: documents written with the token
// of the write that last changed them.
type docStore struct {
	mu   sync.Mutex
	docs map[string]string
	log  []int64 // tokens of the admitted writes, in order
}

func (s *docStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	token, _ := strconv.ParseInt(r.Header.Get(fencehttp.Header), 10, 64)
	time.Sleep(time.Millisecond) // a write that takes a moment
	s.mu.Lock()
	s.docs[r.URL.Path] = string(body)
	s.log = append(s.log, token)
	s.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func newServer(t *testing.T, g fence.Guard) (*httptest.Server, *docStore) {
	store := &docStore{docs: make(map[string]string)}
	h := fencehttp.Middleware(g, func(r *http.Request) string { return r.URL.Path })(store)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, store
}

func put(t *testing.T, c *http.Client, url, body string) (*http.Response, string, error) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, url, strings.NewReader(body))
	resp, err := c.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b), nil
}

// The classic scenario end to end: A's lease expires in the store, B takes
// the key and writes, then A's late write with its old token gets 409.
func TestStaleWriteRefusedEndToEnd(t *testing.T) {
	ctx := context.Background()
	store := fencemem.New()
	srv, docs := newServer(t, &fence.MemoryGuard{})
	c := fence.New(store, fence.WithTTL(time.Minute))

	a, err := c.TryAcquire(ctx, "doc")
	if err != nil {
		t.Fatal(err)
	}
	// A's token as it would send it while paused: a raw token, since the
	// lease object itself would refuse once lost.
	stale := &http.Client{Transport: &fencehttp.Transport{Token: func(*http.Request) (int64, error) { return a.Token(), nil }}}
	store.Expire("doc")
	b, err := c.TryAcquire(ctx, "doc")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Release(ctx)
	fresh := &http.Client{Transport: fencehttp.ForLease(nil, b)}

	resp, _, err := put(t, fresh, srv.URL+"/doc", "from B")
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("B's write: %v %v", resp, err)
	}
	resp, body, err := put(t, stale, srv.URL+"/doc", "from A, late")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("A's late write: status %d; want 409", resp.StatusCode)
	}
	if !strings.Contains(body, "stale fencing token") || !strings.Contains(body, strconv.FormatInt(a.Token(), 10)) {
		t.Errorf("409 body %q does not explain the stale token", body)
	}
	var se *fence.StaleError
	if err := fencehttp.CheckResponse(resp); !errors.As(err, &se) || se.Token != a.Token() || se.Highest != b.Token() {
		t.Errorf("CheckResponse: %v; want a StaleError for token %d, highest %d", err, a.Token(), b.Token())
	}
	if got := docs.docs["/doc"]; got != "from B" {
		t.Errorf("document = %q; the stale write got through", got)
	}
	// Through the lease itself, a lost lease sends nothing at all.
	_ = a.Release(ctx)
	if _, _, err := put(t, &http.Client{Transport: fencehttp.ForLease(nil, a)}, srv.URL+"/doc", "x"); !errors.Is(err, fence.ErrLost) && !errors.Is(err, fence.ErrReleased) {
		t.Errorf("request under a lost lease: %v; want the lease's error", err)
	}
}

func TestBadTokens(t *testing.T) {
	srv, docs := newServer(t, &fence.MemoryGuard{})
	for name, header := range map[string][]string{
		"missing":   nil,
		"empty":     {""},
		"malformed": {"abc"},
		"float":     {"3.5"},
		"zero":      {"0"},
		"negative":  {"-4"},
		"plus":      {"+4"},
		"overflow":  {"99999999999999999999"},
		"two":       {"4", "5"},
	} {
		req, _ := http.NewRequest(http.MethodPut, srv.URL+"/doc", strings.NewReader("x"))
		for _, v := range header {
			req.Header.Add(fencehttp.Header, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s token: status %d; want 400", name, resp.StatusCode)
		}
		if !strings.Contains(string(body), fencehttp.Header) && !strings.Contains(string(body), "token") {
			t.Errorf("%s token: body %q does not say what is wrong", name, body)
		}
	}
	if len(docs.docs) != 0 {
		t.Errorf("a request with a bad token was served: %v", docs.docs)
	}
}

// Many concurrent clients with interleaved tokens: the document ends with
// the highest token's write and the admitted writes never go down.
func TestConcurrentWriters(t *testing.T) {
	for _, strict := range []bool{false, true} {
		t.Run(fmt.Sprintf("strict=%v", strict), func(t *testing.T) {
			srv, docs := newServer(t, &fence.MemoryGuard{Strict: strict})
			const writers, each = 8, 10
			var wg sync.WaitGroup
			var conflicts sync.Map
			for w := range writers {
				wg.Go(func() {
					for i := range each {
						tok := int64(1 + w + writers*(i^1))
						c := &http.Client{Transport: &fencehttp.Transport{Token: func(*http.Request) (int64, error) { return tok, nil }}}
						resp, _, err := put(t, c, srv.URL+"/doc", strconv.FormatInt(tok, 10))
						if err != nil {
							t.Error(err)
							return
						}
						switch resp.StatusCode {
						case http.StatusNoContent:
						case http.StatusConflict:
							conflicts.Store(tok, true)
						default:
							t.Errorf("token %d: status %d", tok, resp.StatusCode)
						}
					}
				})
			}
			wg.Wait()
			const highest = writers * each
			if got := docs.docs["/doc"]; got != strconv.Itoa(highest) {
				t.Errorf("document = %q; want the highest token's write %d", got, highest)
			}
			for i := 1; i < len(docs.log); i++ {
				if docs.log[i] < docs.log[i-1] || strict && docs.log[i] == docs.log[i-1] {
					t.Fatalf("admitted writes went down: %v", docs.log)
				}
			}
			if len(docs.log) == writers*each {
				t.Errorf("no write refused: the interleaving did not test the guard")
			}
		})
	}
}

type failingGuard struct{}

func (failingGuard) Admit(context.Context, string, int64) error { return errors.New("database down") }

func TestGuardFailure(t *testing.T) {
	srv, _ := newServer(t, failingGuard{})
	c := &http.Client{Transport: &fencehttp.Transport{Token: func(*http.Request) (int64, error) { return 5, nil }}}
	resp, body, err := put(t, c, srv.URL+"/doc", "x")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || strings.Contains(body, "database down") {
		t.Errorf("guard failure: %d %q; want 503 without the internal error", resp.StatusCode, body)
	}
}

// The Transport never modifies the caller's request.
func TestTransportDoesNotModifyRequest(t *testing.T) {
	var seen string
	base := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		seen = r.Header.Get(fencehttp.Header)
		return &http.Response{StatusCode: 204, Body: http.NoBody, Request: r}, nil
	})
	tr := &fencehttp.Transport{Base: base, Token: func(*http.Request) (int64, error) { return 42, nil }}
	req, _ := http.NewRequest(http.MethodGet, "http://example.invalid/x", nil)
	if _, err := tr.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if seen != "42" || req.Header.Get(fencehttp.Header) != "" {
		t.Errorf("sent %q; caller's request header now %q", seen, req.Header.Get(fencehttp.Header))
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
