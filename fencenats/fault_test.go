package fencenats_test

import (
	"context"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencenats"
	"github.com/fencing/fence/internal/testkit/faultproxy"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func dial(t *testing.T, url, bucket string, opts ...fencenats.Option) *fencenats.Store {
	t.Helper()
	d, err := fencenats.Dial(ctxT(t), url, bucket, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func newFence(t *testing.T, d fence.Driver, opts ...fence.ClientOption) *fence.Client {
	t.Helper()
	c := fence.New(d, append([]fence.ClientOption{fence.WithTTL(ttl)}, opts...)...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// TestDeletedKeyLosesPromptly deletes the holder's key (nats kv del): the
// holder's lease context ends at its next renewal, well before its TTL.
func TestDeletedKeyLosesPromptly(t *testing.T) {
	srv := startNATS(t)
	ctx := ctxT(t)
	d := dial(t, srv.URL(), "fence")
	const ttl = 9 * time.Second
	l, err := newFence(t, d, fence.WithTTL(ttl)).TryAcquire(ctx, "del")
	if err != nil {
		t.Fatal(err)
	}
	if err := d.KeyValue().Delete(ctx, d.Name("del")); err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	select {
	case <-l.Done():
		t.Logf("loss noticed %v after the delete", time.Since(deleted))
	case <-time.After(ttl * 2 / 3):
		t.Fatalf("lease still valid %v after its key was deleted (renewal every %v)", ttl*2/3, ttl/3)
	}
	var lost *fence.LostError
	if !errors.As(l.Err(), &lost) || lost.Reason != fence.LossRefused {
		t.Errorf("cause %v; want a *LostError with reason %q", l.Err(), fence.LossRefused)
	}
	// The marker the delete left does not stand in the way.
	l2, err := newFence(t, dial(t, srv.URL(), "fence")).TryAcquire(ctx, "del")
	if err != nil {
		t.Fatalf("TryAcquire after the delete: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after %d", l2.Token(), l.Token())
	}
	_ = l2.Release(ctx)
}

// TestTokensAcrossExpiryAndMarkers: a key that expires leaves a marker
// (which wakes watchers); the marker then expires too. Tokens grow through
// all of it.
func TestTokensAcrossExpiryAndMarkers(t *testing.T) {
	srv := startNATS(t)
	ctx := ctxT(t)
	d := dial(t, srv.URL(), "fence")
	c := newFence(t, d)
	key := "expire"
	watch, err := d.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	l, err := c.TryAcquire(ctx, key, fence.WithoutRenewal())
	if err != nil {
		t.Fatal(err)
	}
	last := l.Token()
	select {
	case <-watch:
		if _, err := d.Inspect(ctx, key); !errors.Is(err, fence.ErrNotHeld) {
			t.Errorf("after the expiry marker, Inspect: %v; want ErrNotHeld", err)
		}
	case <-time.After(ttl + 5*time.Second):
		t.Fatalf("no watch signal %v after the key's TTL", ttl+5*time.Second)
	}
	// Taken over the expiry marker.
	l2, err := c.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire over the expiry marker: %v", err)
	}
	if l2.Token() <= last {
		t.Errorf("token %d after %d", l2.Token(), last)
	}
	last = l2.Token()
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}
	// Once the purge marker has expired the key has no message at all.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := d.KeyValue().GetRevision(ctx, d.Name(key), uint64(last)+1)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the purge marker of a released key is still there after 10s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	l3, err := c.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if l3.Token() <= last {
		t.Errorf("token %d after %d on a clean key", l3.Token(), last)
	}
	_ = l3.Release(ctx)
}

// TestExtendRearmsTTL extends a claim past several TTLs: each extend must
// give the key a fresh TTL in the store, or it would expire under its
// holder.
func TestExtendRearmsTTL(t *testing.T) {
	srv := startNATS(t)
	ctx := ctxT(t)
	d := dial(t, srv.URL(), "fence")
	c, err := d.TryAcquire(ctx, fence.Request{Key: "rearm", Owner: "o", TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for range 6 {
		time.Sleep(600 * time.Millisecond)
		if err := c.Extend(ctx, time.Second); err != nil {
			t.Fatalf("Extend: %v", err)
		}
	}
	h, err := d.Inspect(ctx, "rearm")
	if err != nil || h.Owner != "o" || h.Token != c.Token() {
		t.Errorf("Inspect after extends: %+v, %v; want owner o, token %d", h, err, c.Token())
	}
	time.Sleep(3 * time.Second) // no extend: it expires
	if err := c.Extend(ctx, time.Second); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Extend after the key expired: %v; want ErrNotHeld", err)
	}
	if err := c.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Release after the key expired: %v; want ErrNotHeld", err)
	}
}

// TestRecreatedBucketKeepsTokensGrowing deletes the bucket: the driver
// creates a new one whose sequence starts above every token the old one
// issued.
func TestRecreatedBucketKeepsTokensGrowing(t *testing.T) {
	srv := startNATS(t)
	ctx := ctxT(t)
	js := connect(t, srv.URL())
	l, err := newFence(t, dial(t, srv.URL(), "again")).TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	// Make the old bucket's sequence run ahead of a fresh one's.
	_ = l.Release(ctx)
	if err := js.DeleteKeyValue(ctx, "again"); err != nil {
		t.Fatal(err)
	}
	l2, err := newFence(t, dial(t, srv.URL(), "again")).TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d from the re-created bucket, after %d from the old one", l2.Token(), l.Token())
	}
	_ = l2.Release(ctx)
}

func TestBucketModes(t *testing.T) {
	srv := startNATS(t)
	ctx := ctxT(t)
	js := connect(t, srv.URL())
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "forever"}); err != nil {
		t.Fatal(err)
	}
	if _, err := fencenats.New(ctx, js, "forever"); err == nil || !strings.Contains(err.Error(), "WithBucketMaxAge") {
		t.Errorf("New on a bucket whose keys never expire: %v; want an error that says what to do", err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "history", History: 5, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := fencenats.New(ctx, js, "history"); err == nil {
		t.Errorf("New on a bucket with history 5: no error")
	}
	d, err := fencenats.New(ctx, js, "maxage", fencenats.WithBucketMaxAge(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	_, err = d.TryAcquire(ctx, fence.Request{Key: "k", Owner: "o", TTL: 10 * time.Second})
	if !errors.Is(err, fence.ErrInvalidTTL) {
		t.Errorf("TTL longer than the bucket's max age: %v; want ErrInvalidTTL", err)
	}
}

func TestNames(t *testing.T) {
	d := &fencenats.Store{}
	valid := regexp.MustCompile(`^[-/_=a-zA-Z0-9]+$`)
	seen := map[string]string{}
	long := strings.Repeat("ключ.", fence.MaxKeyLen/len("ключ."))
	for _, k := range []string{"a", "a.b", "a/b", "a=2Eb", "=", ".", "..", "with space", "*", ">", long, long[:len(long)-1] + "!"} {
		n := d.Name(k)
		if !valid.MatchString(n) || len(n) > 1024 {
			t.Errorf("Name(%.20q) = %.40q (%d bytes): not one valid KV key token of at most 1024 bytes", k, n, len(n))
		}
		if prev, ok := seen[n]; ok {
			t.Errorf("Name(%.20q) = Name(%.20q)", k, prev)
		}
		seen[n] = k
	}
}

// TestReleaseGivesUpAfterTTL: a release whose reply never comes (dropped
// on the way back, as with a stream leader that died after the purge)
// returns an error within about the lease's TTL, not at the caller's
// deadline, however long: nats.go would wait for the reply until then.
func TestReleaseGivesUpAfterTTL(t *testing.T) {
	srv := startNATS(t)
	ctx := ctxT(t)
	p, err := faultproxy.New(srv.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	l, err := newFence(t, dial(t, "nats://"+p.Addr(), "fence")).TryAcquire(ctx, "rel")
	if err != nil {
		t.Fatal(err)
	}
	p.Blackhole(faultproxy.Downstream)
	start := time.Now()
	err = l.Release(ctx) // ctx lasts two minutes
	took := time.Since(start)
	p.Heal()
	if err == nil || !strings.Contains(err.Error(), "no reply within the lease's TTL") {
		t.Errorf("Release with its reply dropped: %v; want an error saying no reply came within the TTL", err)
	}
	if took > ttl+2*time.Second {
		t.Errorf("Release with its reply dropped took %v; want it given up after the TTL (%v)", took.Round(time.Millisecond), ttl)
	}
	// The purge went through, or the key expired: free for another.
	l2, err := newFence(t, dial(t, srv.URL(), "fence")).Acquire(ctx, "rel", fence.WithWait(2*ttl))
	if err != nil {
		t.Fatalf("Acquire after the lost release: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token %d after %d", l2.Token(), l.Token())
	}
	_ = l2.Release(ctx)
}

// TestBucketDeletedIsMadeAgain: a bucket deleted behind running drivers
// (an operator, or a server that held it in memory and restarted) is made
// again by the next acquisition that finds its stream gone, with tokens
// above every earlier one; the holder of the deleted bucket loses its
// lease. Before, a running driver took the missing stream for one
// electing its leader and a waiting Acquire waited for ever.
func TestBucketDeletedIsMadeAgain(t *testing.T) {
	ctx := ctxT(t)
	srv := testserver.NATS(t)
	d := dial(t, srv.URL(), "wiped")
	c := newFence(t, d)
	held, err := c.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(ctx, "wiped"); err != nil {
		t.Fatal(err)
	}
	l, err := c.Acquire(ctx, "k", fence.WithWait(15*time.Second))
	if err != nil {
		t.Fatalf("Acquire after the bucket was deleted: %v; want the bucket made again and the key granted", err)
	}
	defer l.Release(ctx)
	if l.Token() <= held.Token() {
		t.Errorf("token %d in the bucket made again, %d before; want it greater", l.Token(), held.Token())
	}
	select {
	case <-held.Done():
	case <-time.After(15 * time.Second):
		t.Error("the holder of the deleted bucket still holds")
	}
	st, err := js.Stream(ctx, "KV_wiped")
	if err != nil {
		t.Fatal(err)
	}
	if info := st.CachedInfo(); info.Config.Replicas != 1 || !info.Config.AllowMsgTTL || info.Config.MaxMsgsPerSubject != 1 {
		t.Errorf("the bucket made again: %+v; want it as it was", info.Config)
	}
}
