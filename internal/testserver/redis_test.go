package testserver

import (
	"context"
	"testing"
	"time"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestRedisRestartComesBackEmpty(t *testing.T) {
	t.Parallel()
	start := time.Now()
	r := Redis(t)
	t.Logf("redis-server ready on %s in %v", r.Addr(), time.Since(start))
	ctx := ctxT(t)
	if v, err := redisDo(ctx, r.Addr(), "SET", "k", "v1"); err != nil || v != "OK" {
		t.Fatalf("SET = %v, %v", v, err)
	}
	if v, err := redisDo(ctx, r.Addr(), "GET", "k"); err != nil || v != "v1" {
		t.Fatalf("GET = %v, %v", v, err)
	}
	pid := r.Pid()
	r.Kill()
	if r.Pid() != 0 {
		t.Fatal("Pid after Kill != 0")
	}
	if _, err := redisDo(ctx, r.Addr(), "PING"); err == nil {
		t.Fatal("PING answered after Kill")
	}
	r.Restart()
	if r.Pid() == pid || r.Pid() == 0 {
		t.Fatalf("Pid after Restart = %d (was %d)", r.Pid(), pid)
	}
	if v, err := redisDo(ctx, r.Addr(), "GET", "k"); err != nil || v != nil {
		t.Fatalf("GET after restart = %v, %v; want nil (no persistence)", v, err)
	}
}
