package fencefile_test

import (
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencefile"
)

// Tokens never go back, even when the store's files vanish: a lost
// counter starts again from the wall clock (docs/file.md, "Tokens and the
// clock").

// A key's state deleted between two acquisitions: the next token is still
// greater, for every kind.
func TestDeletedStateBetweenAcquisitions(t *testing.T) {
	ctx := context.Background()
	for _, kc := range kindCases {
		t.Run(kc.name, func(t *testing.T) {
			s := newStore(t)
			var last int64
			for round := range 3 {
				c := tryKind(t, s, "k", "o", kc.kind, kc.limit)
				if c.Token() <= last {
					t.Fatalf("round %d: token %d after %d (the key's files were deleted)", round, c.Token(), last)
				}
				last = c.Token()
				if err := c.Release(ctx); err != nil {
					t.Fatal(err)
				}
				removeFiles(t, keyFiles(s, "k", kc))
			}
		})
	}
}

// The whole state directory deleted (a tmpfs after a reboot, an operator's
// rm -r): the same Store recreates it, a new Store too, and tokens go on
// growing for every kind.
func TestDeletedDirectory(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	last := map[string]int64{}
	acquireAll := func(s *fencefile.Store, when string) {
		t.Helper()
		for _, kc := range kindCases {
			c, err := s.TryAcquire(ctx, kindReq("k", "o", kc.kind, kc.limit))
			if err != nil {
				t.Fatalf("%s: %s: %v", when, kc.name, err)
			}
			if c.Token() <= last[kc.name] {
				t.Errorf("%s: %s token %d, not above %d", when, kc.name, c.Token(), last[kc.name])
			}
			last[kc.name] = c.Token()
			if err := c.Release(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	acquireAll(s, "first")
	before, err := os.Stat(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(s.Dir()); err != nil {
		t.Fatal(err)
	}
	// Nothing is held in a directory that is gone.
	if hs, err := s.List(ctx, ""); err != nil || len(hs) != 0 {
		t.Errorf("List after the directory was deleted: %v, %v; want nothing held", hs, err)
	}
	acquireAll(s, "same Store after the directory was deleted")
	if fi, err := os.Stat(s.Dir()); err != nil || fi.Mode() != before.Mode() {
		t.Errorf("recreated directory: %v, %v; want it as it was, %v", fi.Mode(), err, before.Mode())
	}
	if err := os.RemoveAll(s.Dir()); err != nil {
		t.Fatal(err)
	}
	s2, err := fencefile.New(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	acquireAll(s2, "new Store after the directory was deleted")
}

// A key's files deleted while it is held: a newcomer gets it (the old
// holder locks a file that no longer has a name), with a greater token,
// and the old holder's renewal and release report ErrNotHeld. Deleting the
// whole directory does the same.
func TestDeletedWhileHeld(t *testing.T) {
	ctx := context.Background()
	for _, whole := range []bool{false, true} {
		for _, kc := range kindCases {
			name := kc.name + "/files"
			if whole {
				name = kc.name + "/directory"
			}
			t.Run(name, func(t *testing.T) {
				s := newStore(t)
				// A semaphore's holders fill every slot, so that the
				// newcomer gets in only through the deleted files.
				var old []fence.Claim
				for i := range max(kc.limit, 1) {
					old = append(old, tryKind(t, s, "k", "old"+string(rune('a'+i)), kc.kind, kc.limit))
				}
				if kc.kind == fence.KindRead {
					// A writer must not get in while a reader holds.
					expectHeldKind(t, s, "k", fence.KindWrite, 0, "reader holds")
				} else {
					expectHeldKind(t, s, "k", kc.kind, kc.limit, "held")
				}
				if whole {
					if err := os.RemoveAll(s.Dir()); err != nil {
						t.Fatal(err)
					}
				} else {
					removeFiles(t, keyFiles(s, "k", kc))
				}
				nw := tryKind(t, s, "k", "new", kc.kind, kc.limit)
				defer nw.Release(ctx)
				for _, o := range old {
					if nw.Token() <= o.Token() {
						t.Errorf("newcomer's token %d not above the old holder's %d", nw.Token(), o.Token())
					}
					if err := o.Extend(ctx, time.Second); !errors.Is(err, fence.ErrNotHeld) {
						t.Errorf("old holder's Extend = %v; want ErrNotHeld", err)
					}
					if err := o.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
						t.Errorf("old holder's Release = %v; want ErrNotHeld", err)
					}
				}
				if err := nw.Extend(ctx, time.Second); err != nil {
					t.Errorf("newcomer's Extend: %v", err)
				}
			})
		}
	}
}

// Tokens are seeded from the clock: a key's first token is the wall clock
// in microseconds (so it exceeds every token a counter lost before it
// could have issued), and it stays a positive int64.
func TestFirstTokenFromClock(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	for _, kc := range kindCases {
		before := time.Now().UnixMicro()
		c := tryKind(t, s, "k", "o", kc.kind, kc.limit)
		after := time.Now().UnixMicro()
		if c.Token() < before || c.Token() > after {
			t.Errorf("%s: first token %d, want the clock in µs (%d..%d)", kc.name, c.Token(), before, after)
		}
		c.Release(ctx)
	}
}

// A counter at the largest int64 cannot go on: the acquisition fails with
// an error rather than wrap to a negative or repeated token.
func TestCounterExhausted(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	rec := `{"fence_file":1,"key":"k","token":` + "9223372036854775807" + "}\n"
	if err := os.WriteFile(s.Path("k"), []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := s.TryAcquire(ctx, req("k", "o"))
	if err == nil {
		c.Release(ctx)
		t.Fatalf("acquired with token %d after a counter at %d; want an error", c.Token(), int64(math.MaxInt64))
	}
	if errors.Is(err, fence.ErrHeld) || !strings.Contains(err.Error(), "token") {
		t.Errorf("error = %v; want one about the exhausted token counter", err)
	}
	// The semaphore's counter as well.
	c = tryKind(t, s, "sem", "o", fence.KindSemaphore, 1)
	c.Release(ctx)
	count := strings.TrimSuffix(s.Path("sem"), ".lock") + ".sem-count"
	rec = `{"fence_file":1,"key":"sem","kind":"semaphore","limit":1,"token":9223372036854775807}` + "\n"
	if err := os.WriteFile(count, []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := s.TryAcquire(ctx, kindReq("sem", "o", fence.KindSemaphore, 1)); err == nil {
		c.Release(ctx)
		t.Fatalf("semaphore acquired with token %d after a counter at MaxInt64", c.Token())
	}
}

// A semaphore's counter file deleted while its slots are held: the limit
// the holders were granted with is not lost with it, so a request with
// another limit is still refused, and one with the same limit finds the
// slots full.
func TestDeletedSemaphoreCounterKeepsLimit(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	a := tryKind(t, s, "gpu", "a", fence.KindSemaphore, 2)
	defer a.Release(ctx)
	b := tryKind(t, s, "gpu", "b", fence.KindSemaphore, 2)
	defer b.Release(ctx)
	removeFiles(t, []string{strings.TrimSuffix(s.Path("gpu"), ".lock") + ".sem-count"})
	if c, err := s.TryAcquire(ctx, kindReq("gpu", "x", fence.KindSemaphore, 3)); !errors.Is(err, fence.ErrLimitMismatch) {
		if c != nil {
			c.Release(ctx)
		}
		t.Errorf("limit 3 while two slots are held with limit 2: %v; want ErrLimitMismatch", err)
	}
	expectHeldKind(t, s, "gpu", fence.KindSemaphore, 2, "both slots held")
	a.Release(ctx)
	c := tryKind(t, s, "gpu", "c", fence.KindSemaphore, 2)
	defer c.Release(ctx)
	if c.Token() <= b.Token() {
		t.Errorf("token %d after the counter was deleted; want > %d", c.Token(), b.Token())
	}
}
