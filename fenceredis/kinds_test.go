package fenceredis

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/rwpref"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func kindReq(key, owner string, k fence.Kind, limit int, ttl time.Duration) fence.Request {
	return fence.Request{Key: key, Owner: owner, TTL: ttl, Kind: k, Limit: limit}
}

// Every name of a key's semaphore and reader-writer lock shares the lock's
// Cluster slot, and none looks like a lock name to List.
func TestKindNamesShareTheSlot(t *testing.T) {
	for _, key := range []string{"k", "a{b}c", "%7B", "{}"} {
		n := lockNames(DefaultPrefix, key)
		slot := crc16(hashed(n.lock)) % 16384
		s := &Store{prefix: DefaultPrefix}
		for _, k := range []fence.Kind{fence.KindSemaphore, fence.KindRead} {
			kn := s.kindNames(key, k)
			for _, name := range append(kn.keys(), kn.channel) {
				if got := crc16(hashed(name)) % 16384; got != slot {
					t.Errorf("%s of %q: %s in slot %d; the lock is in %d", k, key, name, got, slot)
				}
				if _, ok := keyOfLock(DefaultPrefix, name); ok {
					t.Errorf("%s of %q: %s looks like a lock name", k, key, name)
				}
			}
		}
	}
}

// A semaphore slot whose holder stopped renewing is reaped by the next
// acquisition: the slot goes to another with a greater token, and the old
// holder can neither renew nor release it. Once everyone has left, only
// the counter remains.
func TestSemaphoreExpiredHolder(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	drv := mustOpen(t, connectSingle(srv)).(*Store)
	old, err := drv.TryAcquire(ctx, kindReq("s", "old", fence.KindSemaphore, 1, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var held *fence.HeldError
	_, err = drv.TryAcquire(ctx, kindReq("s", "new", fence.KindSemaphore, 1, time.Minute))
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Owner != "old" || held.Holder.Token != old.Token() || held.Holder.ExpiresIn <= 0 {
		t.Fatalf("full semaphore: %v; want ErrHeld naming the holder, its token and its time left", err)
	}
	time.Sleep(200 * time.Millisecond)
	c, err := drv.TryAcquire(ctx, kindReq("s", "new", fence.KindSemaphore, 1, time.Minute))
	if err != nil {
		t.Fatalf("TryAcquire after the holder expired: %v", err)
	}
	if c.Token() <= old.Token() {
		t.Errorf("token %d after %d", c.Token(), old.Token())
	}
	if err := old.Extend(ctx, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Extend of the expired slot: %v; want ErrNotHeld", err)
	}
	if err := old.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Release of the reaped slot: %v; want ErrNotHeld", err)
	}
	if err := c.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r := newRaw(t, connectSingle(srv))
	left, err := r.leftovers(ctx, "s")
	if err != nil || len(left) != 0 {
		t.Errorf("keys left after every holder left: %q, %v", left, err)
	}
}

// A slot's member deleted behind its holder's back is lost at the next
// renewal; and a lost counter does not make tokens go back (time seed).
func TestSemaphoreStolenAndCounterLost(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	drv := mustOpen(t, connectSingle(srv)).(*Store)
	c, err := drv.TryAcquire(ctx, kindReq("s", "a", fence.KindSemaphore, 2, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	r := newRaw(t, connectSingle(srv))
	n := drv.kindNames("s", fence.KindSemaphore)
	if err := r.cs[0].ZRem(ctx, n.set, "a").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Extend(ctx, time.Minute); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Extend after the slot was taken away: %v; want ErrNotHeld", err)
	}
	if err := r.cs[0].Del(ctx, n.counter).Err(); err != nil {
		t.Fatal(err)
	}
	c2, err := drv.TryAcquire(ctx, kindReq("s", "b", fence.KindSemaphore, 2, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if c2.Token() <= c.Token() {
		t.Errorf("token %d after the counter was lost, not above %d", c2.Token(), c.Token())
	}
	_ = c2.Release(ctx)
}

// A writer that finds readers marks itself waiting: readers are refused,
// told how long the mark lasts, until it lapses (the writer gave up) or
// the writer gets in (its grant removes the mark). The writer's token is
// above every reader's.
func TestRWWaitingWriterMark(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	drv := mustOpen(t, connectSingle(srv)).(*Store)
	const ttl = 500 * time.Millisecond
	r1, err := drv.TryAcquire(ctx, kindReq("doc", "r1", fence.KindRead, 0, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := drv.TryAcquire(ctx, kindReq("doc", "w", fence.KindWrite, 0, ttl)); !errors.Is(err, fence.ErrHeld) {
		t.Fatalf("writer beside a reader: %v; want ErrHeld", err)
	}
	marked := time.Now()
	var held *fence.HeldError
	_, err = drv.TryAcquire(ctx, kindReq("doc", "r2", fence.KindRead, 0, time.Minute))
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.ExpiresIn <= 0 || held.Holder.ExpiresIn > rwpref.MinIntent {
		t.Fatalf("reader while a writer waits: %v; want ErrHeld with the mark's time left", err)
	}
	for {
		r2, err := drv.TryAcquire(ctx, kindReq("doc", "r2", fence.KindRead, 0, time.Minute))
		if err == nil {
			if since := time.Since(marked); since < rwpref.MinIntent-100*time.Millisecond {
				t.Errorf("reader admitted %v after the writer's last attempt; the mark lasts %v", since, rwpref.MinIntent)
			}
			_ = r2.Release(ctx)
			break
		}
		if time.Since(marked) > 10*time.Second {
			t.Fatalf("the mark of a writer that gave up still keeps readers out: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The writer tries again, then gets in once the reader leaves.
	if _, err := drv.TryAcquire(ctx, kindReq("doc", "w", fence.KindWrite, 0, ttl)); !errors.Is(err, fence.ErrHeld) {
		t.Fatalf("writer beside a reader: %v; want ErrHeld", err)
	}
	_ = r1.Release(ctx)
	w, err := drv.TryAcquire(ctx, kindReq("doc", "w", fence.KindWrite, 0, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if w.Token() <= r1.Token() {
		t.Errorf("writer's token %d not above the reader's %d", w.Token(), r1.Token())
	}
	if err := w.Release(ctx); err != nil {
		t.Fatal(err)
	}
	r3, err := drv.TryAcquire(ctx, kindReq("doc", "r3", fence.KindRead, 0, time.Minute))
	if err != nil {
		t.Fatalf("reader after the writer left: %v (its grant must have removed the mark)", err)
	}
	_ = r3.Release(ctx)
	left, err := newRaw(t, connectSingle(srv)).leftovers(ctx, "doc")
	if err != nil || len(left) != 0 {
		t.Errorf("keys left after everyone left: %q, %v", left, err)
	}
}

// A release of a slot or a read lease wakes the key's watchers, on the
// lock's channel.
func TestKindReleaseWakesWatchers(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	drv := mustOpen(t, connectSingle(srv)).(*Store)
	for _, k := range []fence.Kind{fence.KindSemaphore, fence.KindRead, fence.KindWrite} {
		c, err := drv.TryAcquire(ctx, kindReq("w", "o", k, 1, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		wctx, cancel := context.WithCancel(ctx)
		ch, err := drv.Watch(wctx, "w")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Release(ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Errorf("%s: no wake-up after the release", k)
		}
		cancel()
	}
}

// Redlock does not claim the kinds: the Client refuses them.
func TestRedlockRefusesKinds(t *testing.T) {
	ctx := testCtx(t)
	c := mustClient(t, mustOpen(t, connectRedlock(testserver.Redises(t, 3))))
	if _, err := c.Semaphore("k", 2).TryAcquire(ctx); !errors.Is(err, fence.ErrUnsupported) || !strings.Contains(err.Error(), "semaphore") {
		t.Errorf("semaphore on Redlock: %v; want ErrUnsupported", err)
	}
	if _, err := c.RWMutex("k").TryAcquireRead(ctx); !errors.Is(err, fence.ErrUnsupported) {
		t.Errorf("reader on Redlock: %v; want ErrUnsupported", err)
	}
}
