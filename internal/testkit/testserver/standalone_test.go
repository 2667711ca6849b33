package testserver

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

func TestEnvStartsAndKillsServers(t *testing.T) {
	Require(t, "redis-server")
	env := NewEnv("standalone", nil)
	var r *RedisServer
	if err := env.Do(func(tb testing.TB) { r = Redis(tb) }); err != nil {
		t.Fatalf("Do(Redis): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if v, err := redisDo(ctx, r.Addr(), "PING"); err != nil || v != "PONG" {
		t.Fatalf("PING: %v, %v", v, err)
	}
	if err := env.Do(func(testing.TB) { r.Restart() }); err != nil {
		t.Fatalf("Do(Restart): %v", err)
	}
	if v, err := redisDo(ctx, r.Addr(), "PING"); err != nil || v != "PONG" {
		t.Fatalf("PING after Restart: %v, %v", v, err)
	}
	dir := env.TempDir()
	env.Close()
	if r.Pid() != 0 {
		t.Error("server still running after Close")
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("TempDir %s not removed by Close: %v", dir, err)
	}
	if err := env.Err(); err != nil {
		t.Errorf("Err: %v", err)
	}
}

func TestEnvFatalAndSkipEndDo(t *testing.T) {
	env := NewEnv("standalone", nil)
	defer env.Close()
	reached := false
	err := env.Do(func(tb testing.TB) {
		tb.Fatalf("boom %d", 1)
		reached = true
	})
	if err == nil || err.Error() != "boom 1" || reached {
		t.Errorf("Do after Fatalf: %v (went on: %v)", err, reached)
	}
	err = env.Do(func(tb testing.TB) { Require(tb, "no-such-server-program") })
	if Strict() {
		// Unavailable fails instead of skipping under FENCE_TEST_STRICT=1.
		if err == nil || errors.Is(err, ErrUnavailable) {
			t.Errorf("Do(Require missing) under strict: %v", err)
		}
	} else if !errors.Is(err, ErrUnavailable) {
		t.Errorf("Do(Require missing): %v; want ErrUnavailable", err)
	}
	if err := env.Do(func(tb testing.TB) { tb.Errorf("soft") }); err == nil || err.Error() != "soft" {
		t.Errorf("Do after Errorf: %v", err)
	}
}
