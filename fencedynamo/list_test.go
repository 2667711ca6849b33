package fencedynamo_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fencing/fence"
)

// TestListPages: List follows the Scan's pages (DynamoDB returns at most
// 1 MB of items per Scan), keeps the prefix's keys only, and sorts them.
func TestListPages(t *testing.T) {
	ctx := testCtx(t)
	s := mustOpen(t, server(t))
	big := map[string]string{"pad": strings.Repeat("x", 250_000)}
	const n = 6 // 1.5 MB of items: two pages at least
	var claims []fence.Claim
	for i := range n {
		c, err := s.TryAcquire(ctx, fence.Request{Key: fmt.Sprintf("jobs/%d", n-1-i), Owner: fmt.Sprintf("o%d", i), TTL: ttl, Meta: big})
		if err != nil {
			t.Fatal(err)
		}
		claims = append(claims, c)
	}
	c, err := s.TryAcquire(ctx, req("other", "o"))
	if err != nil {
		t.Fatal(err)
	}
	claims = append(claims, c)
	hs, err := s.List(ctx, "jobs/")
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, h := range hs {
		keys = append(keys, h.Key)
	}
	if got, want := strings.Join(keys, ","), "jobs/0,jobs/1,jobs/2,jobs/3,jobs/4,jobs/5"; got != want {
		t.Errorf("List(jobs/) = %s; want %s", got, want)
	}
	for _, c := range claims {
		if err := c.Release(ctx); err != nil {
			t.Error(err)
		}
	}
	if hs, err := s.List(ctx, ""); err != nil || len(hs) != 0 {
		t.Errorf("List after the releases: %v, %v; want none", hs, err)
	}
}
