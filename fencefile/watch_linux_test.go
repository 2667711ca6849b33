package fencefile_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/fencing/fence"
)

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		case <-time.After(100 * time.Millisecond):
			return
		}
	}
}

func expectWake(t *testing.T, ch <-chan struct{}, why string) {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatalf("%s: watch channel closed", why)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: no wake-up", why)
	}
}

func TestWatch(t *testing.T) {
	s := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := s.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	other, err := s.Watch(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	c := mustAcquire(t, s, "k", "a")
	drain(ch)

	// Failed attempts do not wake waiters: they would wake each other.
	for range 3 {
		if _, err := s.TryAcquire(ctx, req("k", "b")); !errors.Is(err, fence.ErrHeld) {
			t.Fatalf("TryAcquire: %v", err)
		}
	}
	select {
	case <-ch:
		t.Errorf("a failed acquisition woke the watcher")
	case <-time.After(200 * time.Millisecond):
	}

	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	expectWake(t, ch, "release")
	select {
	case <-other:
		t.Errorf("the watcher of another key woke")
	default:
	}

	c = mustAcquire(t, s, "k", "a")
	drain(ch)
	if err := s.Delete("k"); err != nil {
		t.Fatal(err)
	}
	expectWake(t, ch, "break")
	c.Release(ctx)

	cancel()
	for range ch {
	}
	for range other {
	}
}

// The kernel closes a killed holder's lock file, which wakes waiters.
func TestWatchHolderKilled(t *testing.T) {
	s := newStore(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+s.Dir(), holderKeyEnv+"=k")
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if _, err := bufio.NewReader(out).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := s.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	expectWake(t, ch, "holder killed")
}

// Releases of semaphore slots and of reader-writer locks wake the key's
// watchers; a waiting writer's intent (a counter file write) wakes
// nobody, so two waiting writers cannot wake each other in a loop.
func TestWatchKinds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := newStore(t)
	ch, err := s.Watch(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	sem := tryKind(t, s, "k", "a", fence.KindSemaphore, 1)
	drain(ch)
	sem.Release(ctx)
	expectWake(t, ch, "slot released")

	r := tryKind(t, s, "k", "r", fence.KindRead, 0)
	drain(ch)
	expectHeldKind(t, s, "k", fence.KindWrite, 0, "reader holds")
	expectHeldKind(t, s, "k", fence.KindWrite, 0, "reader holds")
	expectHeldKind(t, s, "k", fence.KindRead, 0, "writer waits")
	select {
	case <-ch:
		t.Errorf("refused attempts woke a watcher")
	case <-time.After(300 * time.Millisecond):
	}
	r.Release(ctx)
	expectWake(t, ch, "reader released")
}
