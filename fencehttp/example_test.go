package fencehttp_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencehttp"
	"github.com/fencing/fence/fencemem"
)

// A service guards its writes with the middleware; a client sends its
// lease's token with the Transport. After the key changed hands, the old
// holder's write is refused with 409 Conflict.
func Example() {
	ctx := context.Background()
	resource := func(r *http.Request) string { return r.URL.Path }
	write := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) })
	srv := httptest.NewServer(fencehttp.Middleware(&fence.MemoryGuard{}, resource)(write))
	defer srv.Close()

	store := fencemem.New()
	c := fence.New(store, fence.WithTTL(time.Minute))
	old, _ := c.TryAcquire(ctx, "report")
	defer old.Release(ctx)
	store.Expire("report") // old's lease ran out in the store while it was paused
	cur, _ := c.TryAcquire(ctx, "report")
	defer cur.Release(ctx)

	send := func(token int64) {
		client := &http.Client{Transport: &fencehttp.Transport{
			Token: func(*http.Request) (int64, error) { return token, nil },
		}}
		resp, err := client.Post(srv.URL+"/report", "text/plain", strings.NewReader("data"))
		if err != nil {
			fmt.Println(err)
			return
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(strings.TrimSpace(fmt.Sprint(resp.StatusCode, " ", string(body))))
	}
	send(cur.Token())
	send(old.Token())
	// Output:
	// 204
	// 409 stale fencing token: 1 for "/report" has been superseded (highest admitted: 2); the lease that issued it is no longer valid, acquire the lock again
}

// A liveness probe for a process that leads an election: a leader whose
// work goes on for more than 10 s after its leadership was lost is
// reported unhealthy (503), for the orchestrator to restart it.
func ExampleElectionHealth() {
	c := fence.New(fencemem.New(), fence.WithTTL(30*time.Second))
	e := c.Election("scheduler")
	mux := http.NewServeMux()
	mux.Handle("/healthz", fencehttp.ElectionHealth(e, 10*time.Second))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	ctx := context.Background()
	l, _ := e.Campaign(ctx)
	defer e.Resign(ctx)
	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil {
		panic(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Printf("leading (token %d): %d %s", l.Token(), resp.StatusCode, body)
	// Output: leading (token 1): 200 ok
}
