package fence_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

// batching wraps a fencemem.Store to count, watch and hold its
// ExtendBatch calls. Its claims are fencemem's own, so they stay
// batchable.
type batching struct {
	*fencemem.Store
	mu    sync.Mutex
	calls [][]fence.Claim                                 // each call's claims
	hook  func(ctx context.Context, claims []fence.Claim) // before the store's work, if set
	// extended records, for each claim the store extended, the order of
	// that extension among the test's events.
	events []string
	names  map[fence.Claim]string
}

func newBatching() *batching {
	return &batching{Store: fencemem.New(), names: make(map[fence.Claim]string)}
}

func (b *batching) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	c, err := b.Store.TryAcquire(ctx, req)
	if err == nil {
		b.mu.Lock()
		b.names[c] = req.Key
		b.mu.Unlock()
	}
	return c, err
}

func (b *batching) ExtendBatch(ctx context.Context, claims []fence.Claim, ttls []time.Duration) []error {
	b.mu.Lock()
	b.calls = append(b.calls, slices.Clone(claims))
	hook := b.hook
	b.mu.Unlock()
	if hook != nil {
		hook(ctx, claims)
	}
	errs := b.Store.ExtendBatch(ctx, claims, ttls)
	b.mu.Lock()
	for i, c := range claims {
		if errs[i] == nil {
			b.events = append(b.events, "extended "+b.names[c])
		}
	}
	b.mu.Unlock()
	return errs
}

func (b *batching) setHook(f func(ctx context.Context, claims []fence.Claim)) {
	b.mu.Lock()
	b.hook = f
	b.mu.Unlock()
}

func (b *batching) event(e string) {
	b.mu.Lock()
	b.events = append(b.events, e)
	b.mu.Unlock()
}

// callsWith returns how many calls so far had key's claim in them.
func (b *batching) callsWith(key string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, call := range b.calls {
		for _, c := range call {
			if b.names[c] == key {
				n++
			}
		}
	}
	return n
}

func (b *batching) numCalls() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.calls)
}

func acquireN(t *testing.T, c *fence.Client, n int, prefix string) []*fence.Lease {
	t.Helper()
	ls := make([]*fence.Lease, n)
	for i := range ls {
		l, err := c.TryAcquire(t.Context(), fmt.Sprintf("%s%d", prefix, i))
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	return ls
}

func releaseAll(t *testing.T, ls []*fence.Lease) {
	t.Helper()
	for _, l := range ls {
		if err := l.Release(t.Context()); err != nil && !errors.Is(err, fence.ErrLost) && !errors.Is(err, fence.ErrReleased) {
			t.Errorf("Release(%q): %v", l.Key(), err)
		}
	}
}

// N leases due together are renewed in ceil(N/MaxBatch) calls, none
// larger than MaxBatch, each lease once, and each validity moved on.
func TestBatchRenewsDueLeasesTogether(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		b := newBatching()
		var rec renewCounter
		c := fence.New(b, fence.WithTTL(ttl), fence.WithObserver(&rec))
		n := 2*fence.MaxBatch + 10
		ls := acquireN(t, c, n, "k")
		// Leases acquired within a quarter interval of the first join its
		// batches: their renewals come due within its window.
		time.Sleep(ttl / 3 / 8)
		ls = append(ls, acquireN(t, c, 5, "late")...)
		n += 5
		time.Sleep(ttl/3 - ttl/3/8)
		synctest.Wait()
		want := (n + fence.MaxBatch - 1) / fence.MaxBatch
		if got := b.numCalls(); got != want {
			t.Errorf("%d leases due together renewed in %d ExtendBatch calls; want %d", n, got, want)
		}
		b.mu.Lock()
		seen := map[fence.Claim]bool{}
		for _, call := range b.calls {
			if len(call) > fence.MaxBatch {
				t.Errorf("a call of %d claims; want at most %d", len(call), fence.MaxBatch)
			}
			for _, cl := range call {
				if seen[cl] {
					t.Errorf("claim %q twice in one round", b.names[cl])
				}
				seen[cl] = true
			}
		}
		b.mu.Unlock()
		if len(seen) != n {
			t.Errorf("%d of %d leases renewed", len(seen), n)
		}
		if got := rec.count(); got != n {
			t.Errorf("%d Renewed events for %d leases renewed once; want one each", got, n)
		}
		margin := ttl/50 + 5*time.Millisecond
		for _, l := range ls {
			if v := l.ValidFor(); v != ttl-margin {
				t.Errorf("lease %q valid for %v after its batch; want %v", l.Key(), v, ttl-margin)
			}
		}
		releaseAll(t, ls)
	})
}

// renewCounter is an Observer that counts successful renewals.
type renewCounter struct {
	nopObserver
	mu sync.Mutex
	n  int
}

func (r *renewCounter) Renewed(_ context.Context, e fence.Renewed) {
	if e.Err == nil {
		r.mu.Lock()
		r.n++
		r.mu.Unlock()
	}
}

func (r *renewCounter) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}

// A refused claim in a batch loses that lease at once, with
// LossRefused, and the others in the batch are renewed.
func TestBatchRefusalLosesOnlyThatLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		b := newBatching()
		c := fence.New(b, fence.WithTTL(ttl))
		ls := acquireN(t, c, 3, "k")
		b.Delete("k1")
		time.Sleep(ttl / 3)
		synctest.Wait()
		if b.numCalls() != 1 {
			t.Fatalf("%d ExtendBatch calls; want one", b.numCalls())
		}
		if got := lossReason(t, ls[1]); got != fence.LossRefused {
			t.Errorf("refused lease lost with %q; want %q", got, fence.LossRefused)
		}
		margin := ttl/50 + 5*time.Millisecond
		for _, l := range []*fence.Lease{ls[0], ls[2]} {
			if err := l.Err(); err != nil {
				t.Errorf("lease %q beside the refused one: %v", l.Key(), err)
			}
			if v := l.ValidFor(); v != ttl-margin {
				t.Errorf("lease %q valid for %v; want renewed, %v", l.Key(), v, ttl-margin)
			}
		}
		releaseAll(t, ls)
	})
}

// A batch that hangs ends at the earliest validity end among its leases,
// which are lost then; a lease not in it is renewed on its own schedule
// and stays held.
func TestBatchHungExpiresOnlyItsLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		interval := ttl / 3
		margin := ttl/50 + 5*time.Millisecond
		b := newBatching()
		c := fence.New(b, fence.WithTTL(ttl))
		start := time.Now()
		in := acquireN(t, c, 2, "in")
		// Outside the first batch's window: due half an interval later.
		time.Sleep(interval / 2)
		out := acquireN(t, c, 1, "out")[0]
		var deadlines []time.Duration
		b.setHook(func(ctx context.Context, claims []fence.Claim) {
			b.mu.Lock()
			hang := b.names[claims[0]] != "out0"
			b.mu.Unlock()
			if hang {
				d, _ := ctx.Deadline()
				b.mu.Lock()
				deadlines = append(deadlines, d.Sub(start))
				b.mu.Unlock()
				<-ctx.Done()
			}
		})
		waitDone(t, in[0], 2*ttl)
		lostAt := time.Since(start)
		if lostAt != ttl-margin {
			t.Errorf("lease in the hung batch lost %v after its grant; want at its validity end, %v", lostAt, ttl-margin)
		}
		b.mu.Lock()
		deadlines = slices.Clone(deadlines)
		b.mu.Unlock()
		if len(deadlines) == 0 || deadlines[0] != ttl-margin {
			t.Errorf("hung batch's deadlines %v after the grant; want the first at the validity end %v", deadlines, ttl-margin)
		}
		synctest.Wait()
		for _, l := range in {
			if got := lossReason(t, l); got != fence.LossExpired {
				t.Errorf("lease %q in the hung batch lost with %q; want %q", l.Key(), got, fence.LossExpired)
			}
		}
		if err := out.Err(); err != nil {
			t.Errorf("lease outside the hung batch: %v", err)
		}
		if b.callsWith("out0") < 2 {
			t.Errorf("lease outside the hung batch renewed %d times by then; want at least 2", b.callsWith("out0"))
		}
		time.Sleep(ttl)
		if err := out.Err(); err != nil {
			t.Errorf("lease outside the hung batch, a TTL later: %v", err)
		}
		releaseAll(t, append(in, out))
	})
}

// A lease released while its batch is in flight: Release waits for the
// batch, the store's extension of its claim comes before Release
// returns, the lease stays released, and the other lease is renewed.
func TestBatchReleaseDuringFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		b := newBatching()
		c := fence.New(b, fence.WithTTL(ttl))
		ls := acquireN(t, c, 2, "k")
		entered := make(chan struct{})
		proceed := make(chan struct{})
		b.setHook(func(ctx context.Context, _ []fence.Claim) {
			close(entered)
			<-proceed
		})
		time.Sleep(ttl / 3)
		<-entered
		released := make(chan error, 1)
		go func() {
			err := ls[0].Release(context.Background())
			b.event("release returned")
			released <- err
		}()
		synctest.Wait()
		var err error
		select {
		case err = <-released:
			t.Errorf("Release returned (%v) while the batch renewing the lease was in flight", err)
			b.setHook(nil)
			close(proceed)
		default:
			b.setHook(nil)
			close(proceed)
			err = <-released
		}
		if err != nil {
			t.Errorf("Release: %v", err)
		}
		synctest.Wait()
		b.mu.Lock()
		events := slices.Clone(b.events)
		b.mu.Unlock()
		if i := slices.Index(events, "release returned"); i < 0 || slices.Contains(events[i:], "extended k0") {
			t.Errorf("events %q: the released lease's claim was extended after Release returned", events)
		}
		if err := ls[0].Err(); !errors.Is(err, fence.ErrReleased) {
			t.Errorf("released lease after its batch's success: %v; want ErrReleased", err)
		}
		if v := ls[0].ValidFor(); v != 0 {
			t.Errorf("released lease valid for %v after its batch's success", v)
		}
		other, err := c.TryAcquire(t.Context(), "k0")
		if err != nil {
			t.Errorf("the released key after the batch: %v; want it free", err)
		} else {
			releaseAll(t, []*fence.Lease{other})
		}
		if err := ls[1].Err(); err != nil {
			t.Errorf("the other lease of the batch: %v", err)
		}
		releaseAll(t, ls[1:])
	})
}

// Validity after a batch is measured from the moment the batch was sent,
// not from its answer.
func TestBatchValidityFromSendTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		const slow = 400 * time.Millisecond
		margin := ttl/50 + 5*time.Millisecond
		b := newBatching()
		c := fence.New(b, fence.WithTTL(ttl))
		ls := acquireN(t, c, 2, "k")
		var sent time.Time
		b.setHook(func(ctx context.Context, _ []fence.Claim) {
			sent = time.Now()
			time.Sleep(slow)
		})
		time.Sleep(ttl / 3)
		synctest.Wait()
		time.Sleep(slow)
		synctest.Wait()
		if b.numCalls() != 1 {
			t.Fatalf("%d ExtendBatch calls; want one", b.numCalls())
		}
		for _, l := range ls {
			if got, want := l.ValidFor(), time.Until(sent.Add(ttl-margin)); got != want {
				t.Errorf("lease %q valid for %v after a batch that took %v; want %v, from the send", l.Key(), got, slow, want)
			}
		}
		releaseAll(t, ls)
	})
}

// sessionBatching says it batches every claim, and makes every claim
// session-bound: the Client must still renew them one by one.
type sessionBatching struct {
	*batching
	mu      sync.Mutex
	extends int
}

func (*sessionBatching) Batchable(fence.Claim) bool { return true }

func (d *sessionBatching) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	c, err := d.batching.TryAcquire(ctx, req)
	if err != nil {
		return nil, err
	}
	return &countedSession{Claim: c, d: d}, nil
}

type countedSession struct {
	fence.Claim
	d *sessionBatching
}

func (c *countedSession) NotifyLost(func(error)) {}

func (c *countedSession) Extend(ctx context.Context, ttl time.Duration) error {
	c.d.mu.Lock()
	c.d.extends++
	c.d.mu.Unlock()
	return c.Claim.Extend(ctx, ttl)
}

// Session-bound leases are renewed one by one, even where the driver
// would batch their claims.
func TestBatchLeavesSessionLeasesAlone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		d := &sessionBatching{batching: newBatching()}
		c := fence.New(d, fence.WithTTL(ttl))
		ls := acquireN(t, c, 3, "k")
		time.Sleep(ttl / 3)
		synctest.Wait()
		if n := d.numCalls(); n != 0 {
			t.Errorf("%d ExtendBatch calls for session-bound leases; want none", n)
		}
		d.mu.Lock()
		extends := d.extends
		d.mu.Unlock()
		if extends != len(ls) {
			t.Errorf("%d Extend calls for %d session-bound leases due; want one each", extends, len(ls))
		}
		releaseAll(t, ls)
	})
}

// A batch whose leases have all ended is cancelled: Releases of all its
// leases do not wait for a hung store until the validity ends. (A
// Release waits for the batch while another lease is in it.)
func TestBatchCancelledWhenItsLeasesEnd(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		b := newBatching()
		c := fence.New(b, fence.WithTTL(ttl))
		ls := acquireN(t, c, 2, "k")
		b.setHook(func(ctx context.Context, _ []fence.Claim) { <-ctx.Done() })
		time.Sleep(ttl / 3)
		synctest.Wait()
		if b.numCalls() != 1 {
			t.Fatalf("%d ExtendBatch calls; want one in flight", b.numCalls())
		}
		start := time.Now()
		var wg sync.WaitGroup
		for _, l := range ls {
			wg.Go(func() { releaseAll(t, []*fence.Lease{l}) })
		}
		wg.Wait()
		if d := time.Since(start); d != 0 {
			t.Errorf("releasing every lease of a hung batch took %v; want the batch cancelled at once", d)
		}
	})
}

// lostAt returns a function that reports how long after start each of ls
// was lost (or released); 0 for one still held.
func lostAt(ls []*fence.Lease, start time.Time) func(i int) time.Duration {
	var mu sync.Mutex
	at := make([]time.Duration, len(ls))
	for i, l := range ls {
		go func() {
			<-l.Done()
			mu.Lock()
			at[i] = time.Since(start)
			mu.Unlock()
		}()
	}
	return func(i int) time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return at[i]
	}
}

// Leases with different TTLs renewed by one batch keep each its own
// validity: each ends at the batch's send (not its answer) plus its own
// TTL less its own margin, not its batch-mates', when the renewals after
// it hang.
func TestBatchValidityIsEachLeasesOwn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const short, long = 3 * time.Second, 6 * time.Second
		interval := time.Second
		b := newBatching()
		c := fence.New(b, fence.WithTTL(short))
		start := time.Now()
		ls := []*fence.Lease{acquireN(t, c, 1, "short")[0]}
		l, err := c.TryAcquire(t.Context(), "long", fence.WithTTL(long), fence.WithRenewInterval(interval))
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		lost := lostAt(ls, start)
		// The first renewal of both, one batch at one interval, succeeds
		// after a while; every later call hangs until its deadline.
		b.setHook(func(ctx context.Context, claims []fence.Claim) {
			if b.numCalls() == 1 {
				time.Sleep(200 * time.Millisecond)
				return
			}
			<-ctx.Done()
		})
		time.Sleep(3 * long)
		synctest.Wait()
		b.mu.Lock()
		first := len(b.calls[0])
		b.mu.Unlock()
		if first != 2 {
			t.Fatalf("first ExtendBatch call had %d claims; want both leases in it", first)
		}
		sent := interval
		for i, ttl := range []time.Duration{short, long} {
			want := sent + ttl - (ttl/50 + 5*time.Millisecond)
			if got := lost(i); got != want {
				t.Errorf("lease %q (TTL %v) renewed by a batch sent at %v lost at %v; want at its own validity end %v",
					ls[i].Key(), ttl, sent, got, want)
			}
			if got := lossReason(t, ls[i]); got != fence.LossExpired {
				t.Errorf("lease %q lost with %q; want %q", ls[i].Key(), got, fence.LossExpired)
			}
		}
		releaseAll(t, ls)
	})
}

// Leases one batch renewed can be in different batches at their next
// renewal. When one of those hangs, the leases in it are lost when their
// validity ends, and the leases renewed with them before but in another
// batch now stay held.
func TestBatchHungLeavesItsFormerBatchMates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		interval := ttl / 3
		margin := ttl/50 + 5*time.Millisecond
		b := newBatching()
		c := fence.New(b, fence.WithTTL(ttl))
		start := time.Now()
		n := fence.MaxBatch + 44
		ls := acquireN(t, c, n, "k")
		defer releaseAll(t, ls)
		lost := lostAt(ls, start)
		// First round: two calls, MaxBatch claims and 44. The second
		// takes a moment, so that its leases are due a moment after the
		// first's from then on.
		var round2 [][]fence.Claim
		b.setHook(func(ctx context.Context, claims []fence.Claim) {
			if time.Since(start) < interval+interval/2 {
				if len(claims) < fence.MaxBatch {
					time.Sleep(10 * time.Millisecond)
				}
				return
			}
			b.mu.Lock()
			if len(round2) < 2 {
				round2 = append(round2, slices.Clone(claims))
			}
			b.mu.Unlock()
			if len(claims) < fence.MaxBatch {
				// The smaller call of each later round hangs.
				<-ctx.Done()
			}
		})
		time.Sleep(interval)
		synctest.Wait()
		b.mu.Lock()
		firstRound := slices.Clone(b.calls)
		b.mu.Unlock()
		slices.SortFunc(firstRound, func(a, b []fence.Claim) int { return len(b) - len(a) })
		if len(firstRound) != 2 || len(firstRound[0]) != fence.MaxBatch {
			t.Fatalf("first round: %d calls; want 2, one of %d claims", len(firstRound), fence.MaxBatch)
		}
		// One lease of the full call's is released: at the second round
		// that call's leases leave room for one of the other's.
		i0 := slices.IndexFunc(ls, func(l *fence.Lease) bool { return b.names[firstRound[0][0]] == l.Key() })
		releaseAll(t, ls[i0:i0+1])
		time.Sleep(interval)
		synctest.Wait()
		b.mu.Lock()
		second := slices.Clone(round2)
		b.mu.Unlock()
		if len(second) != 2 || len(second[0])+len(second[1]) != n-1 {
			t.Fatalf("second round: calls of %v claims; want two with the %d leases held", len(second), n-1)
		}
		hung := map[string]bool{}
		for _, call := range second {
			if len(call) < fence.MaxBatch {
				for _, cl := range call {
					hung[b.names[cl]] = true
				}
			}
		}
		moved := 0 // leases of the first round's second call not in the hung call
		for _, cl := range firstRound[1] {
			if !hung[b.names[cl]] {
				moved++
			}
		}
		if moved == 0 {
			t.Fatalf("every lease of the first round's second call is in the hung call; the test needs them split")
		}
		time.Sleep(3 * ttl)
		synctest.Wait()
		// The hung call's leases were last renewed by the first round,
		// sent at the interval (the second call's answer came later).
		want := interval + ttl - margin
		for i, l := range ls {
			switch {
			case i == i0:
			case hung[l.Key()]:
				if got := lost(i); got != want {
					t.Errorf("lease %q in the hung call lost at %v; want at its validity end %v", l.Key(), got, want)
				}
			default:
				if err := l.Err(); err != nil {
					t.Errorf("lease %q, not in the hung call (%d of its earlier batch-mates were): %v", l.Key(), len(hung), err)
				}
			}
		}
	})
}

// Leases renewed in batches, some released and some lost, leave nothing
// on the Client's schedule once all have ended: a cohort's deadlines go
// with its last lease, which they would otherwise keep from the garbage
// collector until they ran.
func TestBatchCohortsLeaveWithTheirLeases(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 3 * time.Second
		b := newBatching()
		c := fence.New(b, fence.WithTTL(ttl))
		ls := acquireN(t, c, fence.MaxBatch+10, "k")
		time.Sleep(2 * ttl / 3)
		synctest.Wait()
		if n, cohorts := c.Deadlines(); n == 0 || n != cohorts {
			t.Fatalf("after two rounds of batches, %d deadlines, %d of cohorts; want only cohorts'", n, cohorts)
		}
		b.Delete("k3") // refused at the next round: lost
		time.Sleep(ttl / 3)
		synctest.Wait()
		if err := ls[3].Err(); !errors.Is(err, fence.ErrLost) {
			t.Fatalf("lease refused in its batch: %v; want lost", err)
		}
		releaseAll(t, ls[:len(ls)/2])
		if n, _ := c.Deadlines(); n == 0 {
			t.Errorf("no deadlines left with half the leases held")
		}
		releaseAll(t, ls[len(ls)/2:])
		if n, cohorts := c.Deadlines(); n != 0 {
			t.Errorf("%d deadlines (%d of cohorts) left once every lease ended; want none", n, cohorts)
		}
	})
}
