package fencehttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencehttp"
	"github.com/fencing/fence/fencemem"
)

// The handler answers 200 while the leader's lease is valid, and 503 with
// the loss once the leader has gone on past the loss for grace.
func TestElectionHealth(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := t.Context()
		store := fencemem.New()
		e := fence.New(store, fence.WithTTL(3*time.Second)).Election("leader")
		h := fencehttp.ElectionHealth(e, time.Second)
		probe := func() (int, string) {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			return rec.Code, rec.Body.String()
		}
		if code, _ := probe(); code != http.StatusOK {
			t.Errorf("before campaigning: %d; want 200", code)
		}
		l, err := e.Campaign(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if code, _ := probe(); code != http.StatusOK {
			t.Errorf("leading: %d; want 200", code)
		}
		store.Delete("leader") // the next renewal is refused
		<-l.Done()
		time.Sleep(time.Second)
		if code, body := probe(); code != http.StatusServiceUnavailable || !strings.Contains(body, "lost") {
			t.Errorf("leading a second past the loss: %d %q; want 503 naming the loss", code, body)
		}
		_ = e.Resign(context.WithoutCancel(ctx))
		if code, _ := probe(); code != http.StatusOK {
			t.Errorf("after Resign: %d; want 200", code)
		}
	})
}
