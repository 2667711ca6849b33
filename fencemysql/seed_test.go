package fencemysql_test

import (
	"testing"
)

// A failover to an asynchronous replica can lose the last token bumps, and
// a restored backup has older counters: here the counter rows are deleted
// behind fence's back. The next token must still be above every earlier
// one, because tokens are seeded from the server's clock.
func TestTokensSurviveLostCounters(t *testing.T) {
	srv, db := server(t)
	ctx := ctxFor(t)
	c := client(t, srv.DSN())
	var last int64
	for round := range 3 {
		l, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if l.Token() <= last {
			t.Errorf("round %d: token %d not above the earlier %d", round, l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, `DELETE FROM fence_tokens`); err != nil {
			t.Fatal(err)
		}
	}
}
