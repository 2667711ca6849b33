//go:build linux

package fencesqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/fencing/fence"
)

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		case <-time.After(200 * time.Millisecond):
			return
		}
	}
}

// A release wakes the watchers (of another Store on the file too); a
// failed attempt wakes nobody, so waiters do not wake each other; the
// channel closes when the watch's context ends.
func TestWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fence.db")
	s, other := open(t, path), open(t, path)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := other.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	c, err := s.TryAcquire(ctx, req("k", "a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	drain(ch)
	for range 3 {
		if _, err := other.TryAcquire(ctx, req("k", "b", time.Minute)); !errors.Is(err, fence.ErrHeld) {
			t.Fatalf("TryAcquire: %v", err)
		}
	}
	select {
	case <-ch:
		t.Errorf("a failed acquisition woke the watcher")
	case <-time.After(300 * time.Millisecond):
	}
	start := time.Now()
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Logf("woken %v after the release", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("the release woke nobody")
	}
	cancel()
	select {
	case _, ok := <-ch:
		for ok {
			_, ok = <-ch
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the channel stayed open after the watch's context ended")
	}
}
