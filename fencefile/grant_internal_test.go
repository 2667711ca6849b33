package fencefile

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/fencing/fence"
)

// A lock or counter file deleted after a grant wrote its token to it, but
// before the grant returned: that grant must not count, since its token
// lives in a file without a name and a newcomer on a new file, drawing its
// token from the clock, would run alongside it. It is done again on the
// file now at the path, which then holds the granted token.
func TestGrantRacingDeletion(t *testing.T) {
	ctx := context.Background()
	defer func() { afterGrantWrite = nil }()
	for _, kind := range []fence.Kind{fence.KindLock, fence.KindSemaphore, fence.KindRead, fence.KindWrite} {
		s, err := New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		deleted := ""
		afterGrantWrite = func(path string) {
			if deleted == "" {
				deleted = path
				if err := os.Remove(path); err != nil {
					t.Error(err)
				}
			}
		}
		c, err := s.TryAcquire(ctx, fence.Request{Key: "k", Owner: "o", TTL: time.Second, Kind: kind, Limit: 1})
		afterGrantWrite = nil
		if err != nil {
			t.Fatalf("%s: %v", kind, err)
		}
		if deleted == "" {
			t.Fatalf("%s: the hook never ran", kind)
		}
		rec := readCounter(deleted)
		if rec.Token != c.Token() {
			t.Errorf("%s: granted token %d, but the file now at %s holds %d: the grant on the deleted file counted", kind, c.Token(), deleted, rec.Token)
		}
		if err := c.Extend(ctx, time.Second); err != nil {
			t.Errorf("%s: Extend right after the grant: %v", kind, err)
		}
		c.Release(ctx)
	}
}

// A holder that released, and a newer one that took the key, between
// Break's look at the holder and its rename of the lock file aside: the
// newer holder keeps its lease, and Break reports it as the holder.
func TestBreakRacingNewHolder(t *testing.T) {
	ctx := context.Background()
	defer func() { beforeBreakAside = nil }()
	s, err := New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	req := fence.Request{Key: "k", Owner: "old", TTL: time.Second}
	old, err := s.TryAcquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	var newer fence.Claim
	beforeBreakAside = func(string) {
		if err := old.Release(ctx); err != nil {
			t.Error(err)
		}
		req.Owner = "newer"
		if newer, err = s.TryAcquire(ctx, req); err != nil {
			t.Error(err)
		}
	}
	_, err = s.Break(ctx, "k", old.Token())
	beforeBreakAside = nil
	if newer == nil {
		t.Fatal("the hook took no newer lease")
	}
	defer newer.Release(ctx)
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Token != newer.Token() {
		t.Errorf("Break(token %d) racing a newer holder (token %d): %v; want a *HeldError naming the newer holder", old.Token(), newer.Token(), err)
	}
	if err := newer.Extend(ctx, time.Second); err != nil {
		t.Errorf("the newer holder's Extend after the refused break: %v", err)
	}
	if ents, _ := os.ReadDir(s.Dir()); len(ents) != 1 {
		t.Errorf("the store directory holds %d files after the break; want the lock file only", len(ents))
	}
}
