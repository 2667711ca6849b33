package testserver

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// TestFakeClock: a PostgreSQL started on a FakeClock reads the moved wall
// clock at once, forward and back; a jump with no server on the clock is
// an error.
func TestFakeClock(t *testing.T) {
	t.Parallel()
	c := NewFakeClock(t)
	if err := c.Jump(time.Hour); err == nil {
		t.Fatal("Jump before any server runs on the clock succeeded; want an error")
	}
	s := Postgres(t, Clock(c))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	skew := func() time.Duration {
		t.Helper()
		rows, err := pgQuery(ctx, s.Addr(), s.Database(), "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")
		if err != nil {
			t.Fatalf("clock_timestamp: %v", err)
		}
		us, err := strconv.ParseInt(rows[0][0], 10, 64)
		if err != nil {
			t.Fatalf("clock_timestamp %q: %v", rows[0][0], err)
		}
		return time.UnixMicro(us).Sub(time.Now()).Round(time.Minute)
	}
	for _, step := range []struct {
		jump, want time.Duration
	}{
		{0, 0},
		{time.Hour, time.Hour},
		{-3 * time.Hour, -2 * time.Hour},
		{2 * time.Hour, 0},
	} {
		if step.jump != 0 {
			if err := c.Jump(step.jump); err != nil {
				t.Fatalf("Jump(%v): %v", step.jump, err)
			}
		}
		if got := skew(); got != step.want || c.Offset() != step.want {
			t.Errorf("after a jump of %v: the server's clock is %v from the real one, Offset %v; want %v", step.jump, got, c.Offset(), step.want)
		}
	}
}
