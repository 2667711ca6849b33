package testserver

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

func TestDynalite(t *testing.T) {
	t.Parallel()
	d := timed(t, "dynalite", func() *DynaliteServer { return Dynalite(t) })
	checkProcess(t, d.Process)
	if want := "http://" + d.Addr(); d.Endpoint() != want {
		t.Errorf("Endpoint() = %q, want %q", d.Endpoint(), want)
	}
	ctx := testContext(t)
	// An API call answers as DynamoDB does: unsigned, it is refused.
	if body := dynamoDo(t, ctx, d.Endpoint(), http.StatusBadRequest); !strings.Contains(body, "MissingAuthenticationToken") {
		t.Errorf("unsigned ListTables: %q; want MissingAuthenticationToken", body)
	}
	d.Kill()
	timed(t, "dynalite restart", func() any { d.Restart(); return nil })
	dynamoDo(t, ctx, d.Endpoint(), http.StatusBadRequest)
}

// dynamoDo sends an unsigned ListTables, failing unless the status is want.
func dynamoDo(t *testing.T, ctx context.Context, endpoint string, want int) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint+"/", bytes.NewReader([]byte("{}")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Amz-Target", "DynamoDB_20120810.ListTables")
	req.Header.Set("Content-Type", "application/x-amz-json-1.0")
	resp, err := noKeepAlive.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("ListTables: %s %s; want %d", resp.Status, b, want)
	}
	return string(b)
}
