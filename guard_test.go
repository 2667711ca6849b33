package fence_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/fencing/fence"
)

func TestMemoryGuardKleppmannScenario(t *testing.T) {
	ctx := context.Background()
	var g fence.MemoryGuard
	if err := g.Admit(ctx, "file", 33); err != nil { // A writes before its pause
		t.Fatal(err)
	}
	if err := g.Admit(ctx, "file", 34); err != nil { // B, the new holder
		t.Fatal(err)
	}
	if err := g.Admit(ctx, "file", 34); err != nil { // B again: same token is fine
		t.Fatalf("same token refused by the default guard: %v", err)
	}
	err := g.Admit(ctx, "file", 33) // A resumes
	var stale *fence.StaleError
	if !errors.As(err, &stale) || !errors.Is(err, fence.ErrStale) || stale.Highest != 34 {
		t.Fatalf("stale token admitted or badly reported: %v", err)
	}
	if g.Highest("file") != 34 {
		t.Errorf("highest %d after a refused write; want 34", g.Highest("file"))
	}
	if err := g.Admit(ctx, "other", 1); err != nil {
		t.Errorf("resources are independent: %v", err)
	}
}

func TestMemoryGuardStrictAndBadTokens(t *testing.T) {
	ctx := context.Background()
	g := fence.MemoryGuard{Strict: true}
	if err := g.Admit(ctx, "r", 5); err != nil {
		t.Fatal(err)
	}
	if err := g.Admit(ctx, "r", 5); !errors.Is(err, fence.ErrStale) {
		t.Errorf("strict guard admitted a repeated token: %v", err)
	}
	for _, tok := range []int64{0, -1} {
		if err := g.Admit(ctx, "r", tok); !errors.Is(err, fence.ErrInvalidToken) {
			t.Errorf("token %d: %v; want ErrInvalidToken", tok, err)
		}
	}
	if g.Highest("r") != 5 {
		t.Errorf("bad tokens changed the guard: highest %d", g.Highest("r"))
	}
}

func TestMemoryGuardConcurrentWriters(t *testing.T) {
	ctx := context.Background()
	var g fence.MemoryGuard
	var mu sync.Mutex
	value, applied := int64(0), []int64{}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				tok := rand.Int64N(1000) + 1
				_ = g.Do(ctx, "r", tok, func() error {
					mu.Lock()
					value = tok
					applied = append(applied, tok)
					mu.Unlock()
					return nil
				})
			}
		})
	}
	wg.Wait()
	for i := 1; i < len(applied); i++ {
		if applied[i] < applied[i-1] {
			t.Fatalf("write with token %d applied after %d", applied[i], applied[i-1])
		}
	}
	if value != g.Highest("r") {
		t.Errorf("final value from token %d; highest admitted %d", value, g.Highest("r"))
	}
}
