package fenceazblob_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/bloberror"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/lease"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceazblob"
)

const ttl = 15 * time.Second

func client(t *testing.T, connect string, opts ...fence.ClientOption) (*fenceazblob.Store, *fence.Client) {
	t.Helper()
	s := mustOpen(t, connect)
	c := fence.New(s, append([]fence.ClientOption{fence.WithTTL(ttl)}, opts...)...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := c.Close(ctx); err != nil {
			t.Errorf("closing client: %v", err)
		}
	})
	return s, c
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustTry(t *testing.T, ctx context.Context, c *fence.Client, key string, opts ...fence.AcquireOption) *fence.Lease {
	t.Helper()
	l, err := c.TryAcquire(ctx, key, opts...)
	if err != nil {
		t.Fatalf("TryAcquire(%.40q): %v", key, err)
	}
	return l
}

// expectNoContainer checks that nothing was sent that creates anything.
func expectNoContainer(t *testing.T, ctx context.Context, s *fenceazblob.Store) {
	t.Helper()
	if _, err := s.Container().GetProperties(ctx, nil); !bloberror.HasCode(err, bloberror.ContainerNotFound) {
		t.Errorf("container properties: %v; want ContainerNotFound (a refused acquisition must send nothing)", err)
	}
}

func TestTTLRange(t *testing.T) {
	ctx := testCtx(t)
	s, c := client(t, server(t))
	for _, bad := range []time.Duration{time.Second, 10 * time.Second, 14 * time.Second,
		60*time.Second + time.Millisecond, 61 * time.Second, 2 * time.Minute} {
		_, err := c.TryAcquire(ctx, "k", fence.WithTTL(bad))
		if !errors.Is(err, fence.ErrInvalidTTL) || !strings.Contains(err.Error(), "15s to 1m0s") {
			t.Errorf("TryAcquire with TTL %v: %v; want ErrInvalidTTL naming the 15s to 1m0s range", bad, err)
		}
	}
	expectNoContainer(t, ctx, s)

	// A TTL inside the range is rounded up, never down.
	for asked, want := range map[time.Duration]time.Duration{
		14200 * time.Millisecond: 15 * time.Second,
		59500 * time.Millisecond: 60 * time.Second,
	} {
		l := mustTry(t, ctx, c, "k", fence.WithTTL(asked))
		h, err := c.Inspect(ctx, "k")
		if err != nil || h.ExpiresIn != want {
			t.Errorf("TTL %v: Inspect = %+v, %v; want a %v lease", asked, h, err, want)
		}
		if err := l.Release(ctx); err != nil {
			t.Error(err)
		}
	}
}

func TestMetadataTooLarge(t *testing.T) {
	ctx := testCtx(t)
	s, c := client(t, server(t))
	big := map[string]string{"big": strings.Repeat("x", 9000)}
	if _, err := c.TryAcquire(ctx, "k", fence.WithMetadata(big)); !errors.Is(err, fence.ErrInvalidOption) {
		t.Errorf("TryAcquire with 9000 bytes of metadata: %v; want ErrInvalidOption", err)
	}
	expectNoContainer(t, ctx, s)
}

// TestBreakIsLoss: an operator breaks the lease, with a break period, as
// `az storage blob lease break` does. The holder loses its lease at its
// next renewal, not at the end of the break; nobody gets the key before
// the break ends; the next holder gets a greater token.
func TestBreakIsLoss(t *testing.T) {
	ctx := testCtx(t)
	connect := server(t)
	s, a := client(t, connect)
	_, b := client(t, connect)
	const key, period = "jobs/nightly", 10 * time.Second

	l := mustTry(t, ctx, a, key)
	lc, err := lease.NewBlobClient(s.Container().NewBlobClient(fenceazblob.BlobName(key)), nil)
	if err != nil {
		t.Fatal(err)
	}
	broke := time.Now()
	if _, err := lc.BreakLease(ctx, &lease.BlobBreakOptions{BreakPeriod: new(int32(period / time.Second))}); err != nil {
		t.Fatalf("breaking the lease: %v", err)
	}
	select {
	case <-l.Done():
		t.Logf("loss noticed %v after the break", time.Since(broke))
	case <-time.After(ttl/3 + 5*time.Second):
		t.Fatalf("holder's lease not lost %v after an operator broke it", time.Since(broke))
	}
	var lost *fence.LostError
	if !errors.As(l.Err(), &lost) || lost.Reason != fence.LossRefused {
		t.Errorf("cause of the broken lease: %v; want a *LostError with reason %q", l.Err(), fence.LossRefused)
	}

	// The store keeps the key until the break period ends.
	_, err = b.TryAcquire(ctx, key)
	if elapsed := time.Since(broke); elapsed < period-2*time.Second && !errors.Is(err, fence.ErrHeld) {
		t.Errorf("TryAcquire %v into a %v break: %v; want ErrHeld", elapsed, period, err)
	}
	l2, err := b.Acquire(ctx, key, fence.WithWait(period+30*time.Second))
	if err != nil {
		t.Fatalf("Acquire after the break: %v", err)
	}
	if took := time.Since(broke); took < period-time.Second {
		t.Errorf("key taken %v after a %v break began", took, period)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token after the break %d is not greater than the broken holder's %d", l2.Token(), l.Token())
	}
	if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
		t.Errorf("Release of the broken lease: %v; want ErrLost", err)
	}
	if err := l2.Renew(ctx); err != nil {
		t.Errorf("new holder's Renew after the old holder's Release: %v", err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Error(err)
	}
}

// TestClaim drives the driver directly: a renewal or release the service
// refuses matches ErrNotHeld, and never touches another owner's lease.
func TestClaim(t *testing.T) {
	ctx := testCtx(t)
	connect := server(t)
	s, other := mustOpen(t, connect), mustOpen(t, connect)
	const key = "k"
	req := func(owner string) fence.Request { return fence.Request{Key: key, Owner: owner, TTL: ttl} }

	c1, err := s.TryAcquire(ctx, req("owner-1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := c1.Extend(ctx, ttl); err != nil {
		t.Errorf("Extend: %v", err)
	}
	if err := c1.Extend(ctx, 2*ttl); !errors.Is(err, fence.ErrInvalidTTL) {
		t.Errorf("Extend of a 15s lease to 30s: %v; want ErrInvalidTTL", err)
	}
	_, err = other.TryAcquire(ctx, req("owner-2"))
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Owner != "owner-1" || held.Holder.Token != c1.Token() ||
		held.Holder.ExpiresIn != ttl {
		t.Errorf("TryAcquire of a held key: %v (holder %+v); want a *HeldError naming owner-1, token %d, expiring within %v",
			err, held.Holder, c1.Token(), ttl)
	}
	if _, err := s.Break(ctx, key, 0); err != nil {
		t.Fatalf("Break: %v", err)
	}
	if _, err := s.Break(ctx, key, 0); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Break of a broken lease: %v; want ErrNotHeld", err)
	}
	if err := c1.Extend(ctx, ttl); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Extend of a broken lease: %v; want ErrNotHeld", err)
	}
	c2, err := other.TryAcquire(ctx, req("owner-2"))
	if err != nil {
		t.Fatalf("TryAcquire after the break: %v", err)
	}
	if c2.Token() <= c1.Token() {
		t.Errorf("token %d after a break is not greater than %d", c2.Token(), c1.Token())
	}
	if err := c1.Release(ctx); !errors.Is(err, fence.ErrNotHeld) || !strings.Contains(err.Error(), `"k"`) {
		t.Errorf("Release of the broken lease: %v; want ErrNotHeld naming the key", err)
	}
	if err := c2.Extend(ctx, ttl); err != nil {
		t.Errorf("the new holder's Extend after the old holder's Release: %v", err)
	}
	if err := c2.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
	if err := c2.Release(ctx); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("second Release: %v; want ErrNotHeld", err)
	}
	if _, err := s.Inspect(ctx, key); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("Inspect after release: %v; want ErrNotHeld", err)
	}
}

// TestTokensSurviveLostCounter: a blob deleted or stripped of its
// metadata behind fence's back (an operator, a lifecycle rule) restarts
// its counter from the store's clock, above every earlier token.
func TestTokensSurviveLostCounter(t *testing.T) {
	ctx := testCtx(t)
	s, c := client(t, server(t))
	const key = "k"
	b := s.Container().NewBlobClient(fenceazblob.BlobName(key))
	var last int64
	next := func(how string) {
		t.Helper()
		l := mustTry(t, ctx, c, key)
		if l.Token() <= last {
			t.Errorf("%s: token %d is not greater than %d", how, l.Token(), last)
		}
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Error(err)
		}
	}
	next("first")
	next("second")
	// The one assumption: the counter is not lost within the second the
	// blob was created (the store's clock has a resolution of a second).
	time.Sleep(1100 * time.Millisecond)
	if _, err := b.Delete(ctx, nil); err != nil {
		t.Fatal(err)
	}
	next("after the blob was deleted")
	time.Sleep(1100 * time.Millisecond)
	if _, err := b.SetMetadata(ctx, map[string]*string{"other": new("x")}, nil); err != nil {
		t.Fatal(err)
	}
	next("after the metadata was overwritten")
	next("then")
}

// Tests that set hooks must not run in parallel with others: the hooks are
// global.

// TestLostRaceBeforeLease: another acquisition bumps the counter between
// an acquisition's read and its lease. The lease, conditional on the
// blob's ETag, is refused; the acquisition reads again and issues a
// greater token, never the same one.
func TestLostRaceBeforeLease(t *testing.T) {
	ctx := testCtx(t)
	connect := server(t)
	_, a := client(t, connect)
	_, b := client(t, connect)
	const key = "k"
	var competitor int64
	reads := 0
	defer fenceazblob.SetTestHooks(func(string) {
		reads++
		if reads != 1 {
			return
		}
		l := mustTry(t, ctx, b, key)
		competitor = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Error(err)
		}
	}, nil)()

	l := mustTry(t, ctx, a, key)
	if competitor == 0 {
		t.Fatal("the competing acquisition did not run")
	}
	if reads != 3 {
		t.Errorf("%d reads; want 3 (the first attempt's, the competitor's, the retry's)", reads)
	}
	if l.Token() <= competitor {
		t.Errorf("token %d, issued after a competitor's %d, is not greater", l.Token(), competitor)
	}
	if err := l.Release(ctx); err != nil {
		t.Error(err)
	}
}

// TestLostLeaseBeforeTokenWrite: the lease is broken and taken by another
// between an acquisition's lease and its token write. The write, under
// the lost lease, is refused; the acquisition reports the key held by the
// new holder, issues no token, and leaves the new holder alone.
func TestLostLeaseBeforeTokenWrite(t *testing.T) {
	ctx := testCtx(t)
	connect := server(t)
	s, a := client(t, connect)
	_, b := client(t, connect)
	const key = "k"
	var taker *fence.Lease
	leased := 0
	defer fenceazblob.SetTestHooks(nil, func(string) {
		leased++
		if leased != 1 {
			return
		}
		if _, err := s.Break(ctx, key, 0); err != nil {
			t.Errorf("Break: %v", err)
		}
		taker = mustTry(t, ctx, b, key)
	})()

	_, err := a.TryAcquire(ctx, key)
	if taker == nil {
		t.Fatal("the competing acquisition did not run")
	}
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Token != taker.Token() {
		t.Errorf("TryAcquire whose lease was taken before its token write: %v; want a *HeldError naming token %d", err, taker.Token())
	}
	if err := taker.Renew(ctx); err != nil {
		t.Errorf("the new holder's Renew: %v", err)
	}
	if err := taker.Release(ctx); err != nil {
		t.Error(err)
	}
}

// TestCancelledAcquireLeavesNothing: an acquisition cancelled after its
// lease was taken, before its token write, releases the lease: the key is
// free at once, not after the lease's 15 s.
func TestCancelledAcquireLeavesNothing(t *testing.T) {
	ctx := testCtx(t)
	connect := server(t)
	_, a := client(t, connect)
	_, b := client(t, connect)
	const key = "k"
	actx, cancel := context.WithCancel(ctx)
	defer fenceazblob.SetTestHooks(nil, func(string) { cancel() })()

	if _, err := a.TryAcquire(actx, key); !errors.Is(err, context.Canceled) {
		t.Errorf("TryAcquire cancelled after its lease: %v; want context.Canceled", err)
	}
	fenceazblob.SetTestHooks(nil, nil)
	l, err := b.TryAcquire(ctx, key)
	if err != nil {
		t.Fatalf("TryAcquire after a cancelled acquisition: %v; its lease was left behind", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Error(err)
	}
}

// TestLongKeys: keys too long for an escaped blob name are hashed; they
// are still distinct locks, listed and inspected under their own key.
func TestLongKeys(t *testing.T) {
	ctx := testCtx(t)
	_, c := client(t, server(t))
	long := "long/" + strings.Repeat("x", fence.MaxKeyLen-6)
	keys := []string{long + "a", long + "b", "long/short", "longer", "other"}
	for _, k := range keys {
		l := mustTry(t, ctx, c, k)
		defer l.Release(ctx)
	}
	hs, err := c.List(ctx, "long/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range hs {
		got = append(got, h.Key)
		if h.Token <= 0 || h.Owner == "" {
			t.Errorf("List entry %.20q: owner %q token %d", h.Key, h.Owner, h.Token)
		}
	}
	if want := []string{"long/short", long + "a", long + "b"}; !slices.Equal(got, want) {
		t.Errorf("List(long/) = %d keys %.30q; want the 3 keys starting with long/, sorted", len(got), got)
	}
	if h, err := c.Inspect(ctx, long+"b"); err != nil || h.Key != long+"b" {
		t.Errorf("Inspect of a hashed key: %.20q, %v", h.Key, err)
	}
}

// TestTokensAcrossRestart: Azurite writes its state to disk every 5 s;
// once it has, tokens keep growing across a kill and restart.
func TestTokensAcrossRestart(t *testing.T) {
	ctx := testCtx(t)
	connect, az := serverProcess(t)
	_, c := client(t, connect)
	var last int64
	for range 3 {
		l := mustTry(t, ctx, c, "k")
		last = l.Token()
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(6 * time.Second) // Azurite's autosave interval is 5 s
	az.Kill()
	az.Restart()
	l := mustTry(t, ctx, c, "k")
	if l.Token() <= last {
		t.Errorf("token %d after a restart is not greater than %d", l.Token(), last)
	}
	if err := l.Release(ctx); err != nil {
		t.Error(err)
	}
}
