package testserver

import (
	"bytes"
	"context"
	"io"
	"net"
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

// TestDynaliteSurvivesAbortedRequest: a client that closes its connection
// with a request half sent (a cancelled context does) must not take the
// server down. dynalite 4.0.0 alone exits on it (its request 'error'
// handler throws); the guard testserver runs it in keeps it serving.
func TestDynaliteSurvivesAbortedRequest(t *testing.T) {
	t.Parallel()
	d := Dynalite(t)
	ctx := testContext(t)
	for range 3 {
		c, err := net.Dial("tcp", d.Addr())
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nX-Amz-Target: DynamoDB_20120810.ListTables\r\n"+
			"Content-Type: application/x-amz-json-1.0\r\nContent-Length: 100\r\n\r\n{\"Lim")
		if err != nil {
			t.Fatal(err)
		}
		c.(*net.TCPConn).SetLinger(0) // a reset, as a cancelled request's
		c.Close()
	}
	// Still serving, and still the same process.
	dynamoDo(t, ctx, d.Endpoint(), http.StatusBadRequest)
	if !strings.Contains(d.LogTail(), "a client aborted a request") {
		t.Errorf("the server's log does not show the aborted requests:\n%s", d.LogTail())
	}
}
