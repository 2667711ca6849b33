package testserver

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"
)

// TestFakeClock: a PostgreSQL and a redis-server started on a FakeClock
// read the moved wall clock at once, forward and back; a jump with no
// server on the clock is an error.
func TestFakeClock(t *testing.T) {
	t.Parallel()
	c := NewFakeClock(t)
	if err := c.Jump(time.Hour); err == nil {
		t.Fatal("Jump before any server runs on the clock succeeded; want an error")
	}
	pg := Postgres(t, Clock(c))
	r := Redis(t, Clock(c))
	my := MariaDB(t, Clock(c))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	since := func(what string, us string, err error) time.Duration {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		n, err := strconv.ParseInt(us, 10, 64)
		if err != nil {
			t.Fatalf("%s %q: %v", what, us, err)
		}
		return time.UnixMicro(n).Sub(time.Now()).Round(time.Minute)
	}
	skews := map[string]func() time.Duration{
		"postgres clock_timestamp()": func() time.Duration {
			rows, err := pgQuery(ctx, pg.Addr(), pg.Database(), "SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint")
			if err != nil {
				return since("clock_timestamp", "", err)
			}
			return since("clock_timestamp", rows[0][0], nil)
		},
		"mariadb NOW(6)": func() time.Duration {
			rows, err := myQuery(ctx, my.Addr(), "", "SELECT CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED)")
			if err != nil {
				return since("NOW(6)", "", err)
			}
			return since("NOW(6)", rows[0][0], nil)
		},
		"redis TIME": func() time.Duration {
			v, err := redisDo(ctx, r.Addr(), "TIME")
			if err != nil {
				return since("TIME", "", err)
			}
			tv, ok := v.([]any)
			if !ok || len(tv) != 2 {
				t.Fatalf("TIME answered %v", v)
			}
			sec, _ := strconv.ParseInt(fmt.Sprint(tv[0]), 10, 64)
			usec, _ := strconv.ParseInt(fmt.Sprint(tv[1]), 10, 64)
			return since("TIME", strconv.FormatInt(sec*1000000+usec, 10), nil)
		},
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
		for name, skew := range skews {
			if got := skew(); got != step.want || c.Offset() != step.want {
				t.Errorf("after a jump of %v: %s is %v from the real clock, Offset %v; want %v", step.jump, name, got, c.Offset(), step.want)
			}
		}
	}
}
