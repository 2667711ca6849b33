package sighting

import (
	"strconv"
	"testing"
	"time"
)

// The lease runs from the first sighting of a version: later reads of the
// same version do not restart it, a new version does, and so does Forget.
func TestLeft(t *testing.T) {
	var b Book
	t0 := time.Now()
	ttl := 10 * time.Second
	if got := b.Left("k", "v1", ttl, t0); got != ttl {
		t.Errorf("first sighting: %v left, want %v", got, ttl)
	}
	if got := b.Left("k", "v1", ttl, t0.Add(4*time.Second)); got != 6*time.Second {
		t.Errorf("same version 4s later: %v left, want 6s", got)
	}
	if got := b.Left("k", "v1", ttl, t0.Add(11*time.Second)); got > 0 {
		t.Errorf("same version past ttl: %v left, want <= 0", got)
	}
	if got := b.Left("k", "v2", ttl, t0.Add(12*time.Second)); got != ttl {
		t.Errorf("a new version: %v left, want a full %v", got, ttl)
	}
	if got := b.Left("other", "v2", ttl, t0.Add(12*time.Second)); got != ttl {
		t.Errorf("another name with the same version: %v left, want %v", got, ttl)
	}
	b.Forget("k")
	if got := b.Left("k", "v2", ttl, t0.Add(30*time.Second)); got != ttl {
		t.Errorf("after Forget: %v left, want a full %v", got, ttl)
	}
}

// Past Max the book is emptied: every lease then waits a full ttl again,
// later than it would have, never sooner.
func TestBoundOnlyDelays(t *testing.T) {
	var b Book
	t0 := time.Now()
	ttl := time.Second
	b.Left("k", "v", ttl, t0)
	for i := range Max {
		b.Left("n"+strconv.Itoa(i), "v", ttl, t0)
	}
	if got := b.Left("k", "v", ttl, t0.Add(2*time.Second)); got != ttl {
		t.Errorf("after the book filled: %v left, want a full %v (restarted)", got, ttl)
	}
}
