package fencenats

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// TestExtendAfterLostReply: an extend went through but its reply was lost,
// so the claim still knows the revision before it. The next extend finds
// the key changed, reads it, sees its own owner and carries on; a key that
// someone else wrote is refused.
func TestExtendAfterLostReply(t *testing.T) {
	srv := testserver.NATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := Dial(ctx, srv.URL(), "fence")
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	cl, err := d.TryAcquire(ctx, fence.Request{Key: "k", Owner: "me", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := cl.(*claim)
	before := c.rev
	if err := c.Extend(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	c.rev = before // the reply of that extend was lost
	if err := c.Extend(ctx, 5*time.Second); err != nil {
		t.Fatalf("Extend after a lost reply: %v", err)
	}
	c.rev = before
	if err := c.Release(ctx); err != nil {
		t.Fatalf("Release after a lost reply: %v", err)
	}

	// Someone else's value is not adopted.
	cl, err = d.TryAcquire(ctx, fence.Request{Key: "k2", Owner: "me", TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c = cl.(*claim)
	if _, err := d.kv.Put(ctx, d.Name("k2"), []byte(`{"key":"k2","owner":"thief","ttl_ms":5000}`)); err != nil {
		t.Fatal(err)
	}
	if err := c.Extend(ctx, 5*time.Second); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Extend after another owner wrote the key: %v; want ErrNotHeld", err)
	}
	if err := c.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Release after another owner wrote the key: %v; want ErrNotHeld", err)
	}
	if h, err := d.Inspect(ctx, "k2"); err != nil || h.Owner != "thief" {
		t.Errorf("the refused Release touched the other owner's key: %+v, %v", h, err)
	}
}
