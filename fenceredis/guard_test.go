package fenceredis

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/testkit/obstest"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func TestCRC16MatchesRedis(t *testing.T) {
	if got := crc16("123456789"); got != 0x31C3 {
		t.Errorf("crc16(123456789) = %#x; want 0x31c3", got)
	}
}

func mustGuard(t *testing.T, addr string, opts ...GuardOption) *Guard {
	t.Helper()
	rdb := newClient(addr)
	t.Cleanup(func() { rdb.Close() })
	g, err := NewGuard(rdb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// The classic scenario: a paused holder resumes with an old token after a
// new holder wrote; its write is refused and the new value stays.
func TestGuardRefusesStaleToken(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	g := mustGuard(t, srv.Addr())
	rdb := newClient(srv.Addr())
	defer rdb.Close()

	if err := g.Set(ctx, "balance", 33, "100"); err != nil {
		t.Fatal(err)
	}
	if err := g.Set(ctx, "balance", 34, "250"); err != nil {
		t.Fatal(err)
	}
	if err := g.Set(ctx, "balance", 34, "260"); err != nil {
		t.Errorf("second write with the same token: %v; the default rule admits it", err)
	}
	err := g.Set(ctx, "balance", 33, "0")
	var stale *fence.StaleError
	if !errors.As(err, &stale) || !errors.Is(err, fence.ErrStale) {
		t.Fatalf("write with token 33 after 34: %v; want a *fence.StaleError", err)
	}
	if stale.Token != 33 || stale.Highest != 34 || stale.Resource != "balance" {
		t.Errorf("StaleError = %+v; want resource balance, token 33, highest 34", stale)
	}
	if v := rdb.Get(ctx, "balance").Val(); v != "260" {
		t.Errorf("balance = %q after a refused write; want 260", v)
	}
	if h, err := g.Highest(ctx, "balance"); err != nil || h != 34 {
		t.Errorf("Highest = %d, %v; want 34", h, err)
	}

	// HSET, and Admit shares the record.
	if err := g.HSet(ctx, "account", 7, "owner", "b", "limit", 5); err != nil {
		t.Fatal(err)
	}
	if err := g.HSet(ctx, "account", 6, "owner", "a"); !errors.Is(err, fence.ErrStale) {
		t.Errorf("HSet with a lower token: %v; want ErrStale", err)
	}
	if got := rdb.HGetAll(ctx, "account").Val(); got["owner"] != "b" || got["limit"] != "5" {
		t.Errorf("account = %v; want owner=b limit=5", got)
	}
	if err := g.Admit(ctx, "account", 5); !errors.Is(err, fence.ErrStale) {
		t.Errorf("Admit with a lower token: %v; want ErrStale", err)
	}
	if err := g.Admit(ctx, "account", 8); err != nil {
		t.Errorf("Admit with a higher token: %v", err)
	}
	if err := g.HSet(ctx, "account", 7, "owner", "c"); !errors.Is(err, fence.ErrStale) {
		t.Errorf("HSet below a token admitted by Admit: %v; want ErrStale", err)
	}

	// Bad input changes nothing.
	for _, tok := range []int64{0, -1} {
		if err := g.Set(ctx, "balance", tok, "x"); !errors.Is(err, fence.ErrInvalidToken) {
			t.Errorf("Set with token %d: %v; want ErrInvalidToken", tok, err)
		}
	}
	if err := g.HSet(ctx, "account", 9, "odd"); err == nil {
		t.Error("HSet with an odd argument count succeeded")
	}
	// A write Redis refuses records nothing.
	if err := g.HSet(ctx, "balance", 40, "f", "v"); err == nil {
		t.Error("HSet on a string key succeeded")
	}
	if h, _ := g.Highest(ctx, "balance"); h != 34 {
		t.Errorf("Highest = %d after a failed write with token 40; want 34 (nothing recorded)", h)
	}
}

// With WithGuardMetrics, admissions and stale refusals are reported.
func TestGuardMetrics(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	var rec obstest.Recorder
	g := mustGuard(t, srv.Addr(), WithGuardMetrics(&rec))
	g.Admit(ctx, "r", 7)
	g.Set(ctx, "r", 7, "v")
	g.Set(ctx, "r", 6, "old")
	g.Admit(ctx, "r", 0) // invalid: not reported
	if admitted, refused := rec.GuardCounts(); admitted != 2 || refused != 1 {
		t.Errorf("guard decisions: %d admitted, %d refused; want 2, 1", admitted, refused)
	}
}

func TestGuardStrict(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	g := mustGuard(t, srv.Addr(), StrictGuard())
	if err := g.Set(ctx, "k", 5, "a"); err != nil {
		t.Fatal(err)
	}
	err := g.Set(ctx, "k", 5, "b")
	var stale *fence.StaleError
	if !errors.As(err, &stale) || !stale.Strict {
		t.Errorf("strict guard, same token twice: %v; want a strict *fence.StaleError", err)
	}
	if err := g.Set(ctx, "k", 6, "c"); err != nil {
		t.Errorf("strict guard, higher token: %v", err)
	}
}

// Tokens near the top of int64 compare exactly (Lua's numbers would not).
func TestGuardLargeTokens(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	g := mustGuard(t, srv.Addr())
	const big = int64(1) << 62
	if err := g.Set(ctx, "k", big+1, "a"); err != nil {
		t.Fatal(err)
	}
	if err := g.Set(ctx, "k", big, "b"); !errors.Is(err, fence.ErrStale) {
		t.Errorf("token 2^62 after 2^62+1: %v; want ErrStale", err)
	}
}

// Concurrent writers with interleaved tokens: the final value is the
// highest token's, and every write with a lower token that started after
// the highest token's first accepted write had returned was refused.
func TestGuardConcurrentWriters(t *testing.T) {
	ctx := testCtx(t)
	srv := testserver.Redis(t)
	rdb := newClient(srv.Addr())
	defer rdb.Close()
	const writers, writes = 8, 40
	tokens := rand.Perm(writers) // token i+1 for writer order[i]: interleaved
	type attempt struct {
		token      int64
		start, end time.Time
		ok         bool
	}
	var (
		mu       sync.Mutex
		attempts []attempt
		wg       sync.WaitGroup
	)
	for w := range writers {
		token := int64(tokens[w] + 1)
		g := mustGuard(t, srv.Addr())
		wg.Go(func() {
			for range writes {
				start := time.Now()
				err := g.Set(ctx, "shared", token, fmt.Sprintf("written with %d", token))
				end := time.Now()
				if err != nil && !errors.Is(err, fence.ErrStale) {
					t.Errorf("token %d: %v", token, err)
					return
				}
				mu.Lock()
				attempts = append(attempts, attempt{token, start, end, err == nil})
				mu.Unlock()
				time.Sleep(time.Duration(rand.IntN(500)) * time.Microsecond)
			}
		})
	}
	wg.Wait()

	top := int64(writers)
	if v := rdb.Get(ctx, "shared").Val(); v != fmt.Sprintf("written with %d", top) {
		t.Errorf("final value %q; want the highest token's, %d", v, top)
	}
	var firstTop time.Time // when the highest token's first accepted write returned
	for _, a := range attempts {
		if a.token == top && a.ok && (firstTop.IsZero() || a.end.Before(firstTop)) {
			firstTop = a.end
		}
	}
	if firstTop.IsZero() {
		t.Fatal("the highest token never wrote")
	}
	refused, late := 0, 0
	for _, a := range attempts {
		if !a.ok {
			refused++
		}
		if a.token < top && a.start.After(firstTop) {
			late++
			if a.ok {
				t.Errorf("write with token %d started %v after token %d had written, and was accepted",
					a.token, a.start.Sub(firstTop), top)
			}
		}
	}
	t.Logf("%d writes, %d refused; %d lower-token writes after the highest token's first, all refused",
		len(attempts), refused, late)
	if late == 0 {
		t.Error("no lower-token write came after the highest token's first write: the test proved nothing")
	}
}

// On a Cluster the record shares the slot of any key, so guarded writes
// work whatever the key looks like.
func TestGuardCluster(t *testing.T) {
	ctx := testCtx(t)
	cl := testserver.RedisCluster(t, 3)
	rdb := newClusterClient(cl.Addrs())
	defer rdb.Close()
	g, err := NewGuard(rdb)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"plain", "{user:1}:balance", "a}b", "}{", "x{}y", "{a}{b}", "ключ"} {
		if err := g.Set(ctx, key, 2, "v"); err != nil {
			t.Errorf("Set(%q): %v", key, err)
			continue
		}
		if err := g.Set(ctx, key, 1, "old"); !errors.Is(err, fence.ErrStale) {
			t.Errorf("Set(%q) with a lower token: %v; want ErrStale", key, err)
		}
		ks, rs := rdb.ClusterKeySlot(ctx, key).Val(), rdb.ClusterKeySlot(ctx, g.record(key)).Val()
		if ks != rs {
			t.Errorf("key %q in slot %d, its record %q in slot %d", key, ks, g.record(key), rs)
		}
	}
}
