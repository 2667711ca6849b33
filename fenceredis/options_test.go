package fenceredis

import (
	"errors"
	"strings"
	"testing"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// WithPrefix puts every key under the prefix, and drivers with different
// prefixes do not see each other's locks.
func TestWithPrefix(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	connect := connectSingle(srv)
	rdb := newClient(srv.Addr())
	defer rdb.Close()

	app := mustClient(t, mustOpen(t, connect, WithPrefix("app:")))
	other := mustClient(t, mustOpen(t, connect))
	l, err := app.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range rdb.Keys(ctx, "*").Val() {
		if !strings.HasPrefix(k, "app:") {
			t.Errorf("key %q outside the prefix app:", k)
		}
	}
	if n := rdb.Exists(ctx, lockNames("app:", "k").lock).Val(); n != 1 {
		t.Errorf("no lock %q", lockNames("app:", "k").lock)
	}
	l2, err := other.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("a driver with the default prefix: %v; want its own lock", err)
	}
	_ = l2.Release(ctx)
	_, err = mustClient(t, mustOpen(t, connect, WithPrefix("app:"))).TryAcquire(ctx, "k")
	if !errors.Is(err, fence.ErrHeld) {
		t.Errorf("a second driver with the same prefix: %v; want ErrHeld", err)
	}
	_ = l.Release(ctx)
}

// WithGuardPrefix names the guard's records.
func TestWithGuardPrefix(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	rdb := newClient(srv.Addr())
	defer rdb.Close()
	g := mustGuard(t, srv.Addr(), WithGuardPrefix("app:g:"))
	if err := g.Admit(ctx, "res", 7); err != nil {
		t.Fatal(err)
	}
	keys := rdb.Keys(ctx, "*").Val()
	if len(keys) != 1 || !strings.HasPrefix(keys[0], "app:g:") {
		t.Errorf("keys %q; want one record under app:g:", keys)
	}
	// A guard with the default prefix keeps records of its own.
	if err := mustGuard(t, srv.Addr()).Admit(ctx, "res", 3); err != nil {
		t.Errorf("default-prefix guard refused token 3: %v", err)
	}
	if _, err := NewGuard(rdb, WithGuardPrefix("a{b}")); err == nil {
		t.Error("a guard prefix with braces was accepted")
	}
}
