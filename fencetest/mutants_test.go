package fencetest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

// broken lists one broken driver per rule of the contract (driver.go's
// doc comments and docs/design.md section 3), each with the suite's
// checks that must catch it and a piece of the message they must fail
// with. The rules no broken driver here breaks, and why, follow the
// table.
var broken = map[string]brokenDriver{
	// Driver.TryAcquire: one attempt, never a wait.
	"try-acquire-waits": {build: tryAcquireWaits, catch: []string{"TryAcquireHeld"},
		why: "TryAcquire must never wait for the key"},
	// Driver.TryAcquire: a held key is refused (rule 1, mutual exclusion).
	"grants-held-key": {build: grantsHeldKey, catch: []string{"TryAcquireHeld", "MutualExclusion"},
		why: "driver TryAcquire granted a key held as lock"},
	// Driver.TryAcquire: the refusal names the holder where the store can.
	"held-error-names-nobody": {build: heldNamesNobody, catch: []string{"TryAcquireHeld"},
		why: "HeldError.Holder is nil, though the driver can Inspect"},
	// Request.SkipHolder: the holder may be left out, the *HeldError not.
	"skip-holder-drops-held-error": {session: true, build: skipHolderPlainError, catch: []string{"WaitWakes"},
		why: "waiting Acquire: "},
	// Request.Key: long keys are mapped, never cut to a common prefix.
	"long-keys-truncated": {build: longKeysCut, catch: []string{"KeyShapes"},
		why: "distinct keys must be distinct locks"},
	// Driver.TryAcquire: grant at least the TTL asked (rule 3).
	"short-grant": {build: shortGrant, catch: []string{"TTLInStore/Grant"},
		why: "after the grant request was sent"},
	// Claim.Extend: at least the TTL asked from now (rule 3).
	"short-extend": {build: shortExtend, catch: []string{"TTLInStore/Extend"},
		why: "after the extend request was sent"},
	// Claim.Extend: ErrNotHeld once the store no longer holds the lease
	// for this owner (rule 4).
	"extend-never-refuses": {build: extendNeverRefuses, catch: []string{"ForcedLoss"},
		why: "lease context not cancelled"},
	// Claim.Release: compare-and-delete by owner (rule 5)...
	"release-deletes-unconditionally": {build: releaseAnyway, catch: []string{"LocalValidity"},
		why: "the expired holder's Release must not touch the new holder"},
	// ...and ErrNotHeld once the store no longer holds the lease: a loss
	// found only at release is still a loss.
	"release-never-refuses": {build: releaseNeverRefuses, catch: []string{"Release"},
		why: "the driver's Release must report ErrNotHeld"},
	// Breaker: a break with a stale token changes nothing...
	"break-ignores-token": {build: breakIgnoresToken, catch: []string{"Break"},
		why: "a break with a stale token changes nothing"},
	// ...and keeps the token counter (rule 2).
	"break-resets-tokens": {build: breakResetsTokens, catch: []string{"Break"},
		why: "token after the break 1 is not greater"},
	// Resumer: the token and the owner must both match...
	"resume-ignores-token": {build: resumeIgnoresToken, catch: []string{"Resume"},
		why: "a wrong token or owner is refused"},
	"resume-ignores-owner": {build: resumeIgnoresOwner, catch: []string{"Resume"},
		why: "resume with another owner: <nil>"},
	// ...and the lease is extended (rule 3).
	"resume-not-extended": {build: resumeNotExtended, catch: []string{"Resume"},
		why: "the resume must extend the lease"},
	// No orphans (rule 6): a holder that stops renewing frees the key
	// after the TTL.
	"lease-outlives-ttl": {build: leaseOutlivesTTL, catch: []string{"LocalValidity"},
		why: "waiter did not get the key after the holder's lease expired"},
	// Tokens strictly increase (rule 2): after a release...
	"token-resets-after-release": {build: tokenResets, catch: []string{"Tokens"},
		why: "release then acquire #1: token 1, not greater than the previous 1"},
	// ...and after an expiry.
	"tokens-repeat-after-expiry": {build: tokensRepeatAfterExpiry, catch: []string{"Tokens"},
		why: "acquire after expiry: token"},
	// ...and are > 0 (rule 2), which the Client enforces.
	"tokens-not-positive": {build: tokensNegative, catch: []string{"Tokens"},
		why: "driver returned invalid token"},
	// Driver: a store that cannot answer says so with ErrUnavailable, so
	// that a waiting Acquire waits through the outage.
	"outage-not-marked": {session: true, build: outageNotMarked, catch: []string{"Outage"},
		why: "returned during the outage"},
	// State loss never sends tokens back (rule 9).
	"state-loss-resets-tokens": {build: stateLossResets, catch: []string{"StateLoss"},
		why: "state loss must never send tokens back"},
	// Bad input gets a clear error and changes nothing (rule 8)...
	"refusal-leaves-lease": {build: refusalLeavesLease, catch: []string{"BadInput"},
		why: "a refused request must change nothing"},
	// ...and is never granted in part.
	"ttl-capped-silently": {build: ttlCapped, catch: []string{"BadInput"},
		why: "granted, but only in part"},
	// Request.Kind: each kind is a namespace of its own.
	"kinds-share-namespace": {build: kindsShare, catch: []string{"Kinds"},
		why: "each kind is a namespace of its own"},
	// KindSemaphore: never more than the limit...
	"semaphore-admits-one-more": {build: semaphoreOneMore, catch: []string{"Semaphore"},
		why: "TryAcquire on a full semaphore of 3 granted one more"},
	// ...and ErrLimitMismatch for a limit other than the holders'.
	"limit-mismatch-unreported": {build: limitMismatchHidden, catch: []string{"Semaphore"},
		why: "want ErrLimitMismatch"},
	// KindRead: a waiting writer keeps new readers out.
	"rw-writer-not-preferred": {build: writerNotPreferred, catch: []string{"RWWriterPreference"},
		why: "a waiting writer must keep them out"},
	// KindWrite: a writer's token is above the readers' before it.
	"rw-writer-token-below-readers": {build: writerTokensApart, catch: []string{"RWMutex"},
		why: "not greater than the earlier readers'"},
	// Watcher: a release puts a value on the channel (rule 7).
	"deaf-watch": {build: deafWatch, catch: []string{"Watch"},
		why: "no value on the Watch channel"},
	// Inspector: the true holder and token...
	"inspect-wrong-holder": {build: inspectWrongHolder, catch: []string{"Inspect"},
		why: `owner "someone-else"`},
	// ...and ErrNotHeld for a free key.
	"inspect-free-key-held": {build: inspectFreeHeld, catch: []string{"Inspect"},
		why: "Inspect of a free key: <nil>; want ErrNotHeld"},
	// Request.Meta: stored and returned by Inspect.
	"inspect-loses-metadata": {build: inspectLosesMeta, catch: []string{"Inspect"},
		why: "lost job=fencetest"},
	// Lister: the keys under the prefix only...
	"list-ignores-prefix": {build: listAll, catch: []string{"List"},
		why: "-outside"},
	// ...sorted by key.
	"list-unsorted": {build: listUnsorted, catch: []string{"List"},
		why: `["c/d" "b" "a"]`},
	// WaiterCounter: the contenders waiting now.
	"waiters-miscounted": {build: waitersMiscounted, catch: []string{"Waiters"},
		why: "with two contenders waiting = 1"},
	// SessionClaim: f is called when the session is gone (rule 4).
	"loss-notifier-never-fires": {session: true, build: notifierNeverFires, catch: []string{"SessionLoss/lock"},
		why: `want a *LostError with reason "session"`},
	// SessionClaim: f is called promptly, well under a TTL (rule 4).
	"loss-reported-late": {session: true, build: lossReportedLate, catch: []string{"SessionLoss/lock"},
		why: "loss must be prompt"},
	// SessionClaim: f is called at once if the session is gone already.
	"loss-notifier-misses-early-loss": {session: true, build: notifierMissesEarlyLoss, catch: []string{"SessionLoss/killed-before-registration"},
		why: "was never reported"},
	// A semaphore holder whose session is revoked is lost...
	"revoked-semaphore-holder-not-lost": {session: true, build: semaphoreLossUnreported, catch: []string{"SessionLoss/semaphore"},
		why: `want a *LostError with reason "session"`},
	// ...and its slot freed at once (rule 6).
	"revoked-semaphore-slot-kept": {session: true, build: semaphoreSlotKept, catch: []string{"SessionLoss/semaphore"},
		why: "it must be freed at once"},
	// A driver whose session was killed carries on with a new one.
	"killed-session-reused": {session: true, perClient: true, build: reusesDeadSession,
		catch: []string{"SessionLoss/lock", "SessionLoss/semaphore", "SessionLoss/read"},
		why:   "on the client whose session was killed"},
	// BlockingAcquirer: a cancelled wait leaves nothing behind (rule 7)...
	"cancelled-wait-leaves-request": {session: true, build: cancelLeavesRequest, catch: []string{"CancelledWait"},
		why: "the cancelled waiter left something behind"},
	// ...nor does a writer's: a writer that gives up lets readers in, at
	// once where the store queues waiters...
	"cancelled-writer-leaves-request": {session: true, build: cancelledWriterStays, catch: []string{"CancelledWait"},
		why: "after a writer gave up its wait"},
	// ...and once its mark lapses where the store keeps one (KindRead).
	"writer-mark-never-lapses": {build: writerMarkStays, catch: []string{"CancelledWait"},
		why: "after a writer gave up its wait"},
	// MultiAcquirer: every key or none.
	"multi-grants-some": {build: multiGrantsSome, catch: []string{"Multi"},
		why: "driver TryAcquireAll refused, yet took a key"},
	// LockDelayer: an unclean loss blocks the key for the delay.
	"lock-delay-ignored": {build: lockDelayIgnored, catch: []string{"LockDelay"},
		why: "free within its lock-delay"},
	// BatchExtender: a refused claim does not fail the others...
	"batch-refusal-spreads": {build: batchRefusalSpreads, catch: []string{"BatchExtend"},
		why: "a refusal beside it must not fail it"},
	// ...each is extended by the TTL asked (rule 3)...
	"batch-extends-nothing": {build: batchExtendsNothing, catch: []string{"BatchExtend"},
		why: "ExtendBatch by 3 TTLs"},
	// ...and there is one result per claim.
	"batch-drops-results": {build: batchDropsResults, catch: []string{"BatchExtend"},
		why: "want one per claim"},
}

// Rules no broken driver here breaks:
//   - Driver: safe for concurrent use. Every check runs several clients,
//     and clients share one driver in the self-test; a data race shows
//     under -race in the driver's own test, not as a check's failure.
//   - BlockingAcquirer.Acquire returns ctx's error when ctx is done: the
//     Client reports the context's cause whatever the driver returns, so
//     no user sees a break of it.
//   - Watcher: stops watching when ctx is done; SessionClaim: f called
//     once and without locks f could need. A break leaks a goroutine or
//     deadlocks in the driver's process (leakcheck and the test timeout of
//     the driver's package), or leaves an entry that Leftovers sees where
//     the store keeps one.
//   - Rule 2 across a restart or failover of the store, FIFO and
//     SemaphoreFIFO (Store.Queue), HolderDies, MutualExclusionProcesses
//     and Partitions in processes: the bases live in one process and
//     neither restart nor queue; the driver packages' fault tests restart
//     servers, and rules 1 and 6 are broken in-process above.
//   - Rule 7's "no tight polling": the Client's own polling has backoff;
//     a driver's Acquire that spins would cost CPU, which no check
//     measures.

// mutant is fencemem with some of its methods replaced.
type mutant struct {
	*fencemem.Store
	tryAcquire func(ctx context.Context, req fence.Request) (fence.Claim, error)
	watch      func(ctx context.Context, key string) (<-chan struct{}, error)
	inspect    func(ctx context.Context, key string) (fence.Holder, error)
	list       func(ctx context.Context, prefix string) ([]fence.Holder, error)
	waiters    func(ctx context.Context, key string) (int, error)
}

func (m *mutant) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	if m.tryAcquire != nil {
		return m.tryAcquire(ctx, req)
	}
	return m.Store.TryAcquire(ctx, req)
}

func (m *mutant) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	if m.watch != nil {
		return m.watch(ctx, key)
	}
	return m.Store.Watch(ctx, key)
}

func (m *mutant) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	if m.inspect != nil {
		return m.inspect(ctx, key)
	}
	return m.Store.Inspect(ctx, key)
}

func (m *mutant) List(ctx context.Context, prefix string) ([]fence.Holder, error) {
	if m.list != nil {
		return m.list(ctx, prefix)
	}
	return m.Store.List(ctx, prefix)
}

func (m *mutant) Waiters(ctx context.Context, key string) (int, error) {
	if m.waiters != nil {
		return m.waiters(ctx, key)
	}
	return m.Store.Waiters(ctx, key)
}

// mutantClaim is a claim with some of its methods replaced.
type mutantClaim struct {
	fence.Claim
	token   int64 // 0: the claim's own
	extend  func(ctx context.Context, ttl time.Duration) error
	release func(ctx context.Context) error
}

func (c *mutantClaim) Token() int64 {
	if c.token != 0 {
		return c.token
	}
	return c.Claim.Token()
}

func (c *mutantClaim) Extend(ctx context.Context, ttl time.Duration) error {
	if c.extend != nil {
		return c.extend(ctx, ttl)
	}
	return c.Claim.Extend(ctx, ttl)
}

func (c *mutantClaim) Release(ctx context.Context) error {
	if c.release != nil {
		return c.release(ctx)
	}
	return c.Claim.Release(ctx)
}

// claims returns a TryAcquire that wraps each claim of s by wrap.
func claims(s *fencemem.Store, wrap func(fence.Request, fence.Claim) fence.Claim) func(context.Context, fence.Request) (fence.Claim, error) {
	return func(ctx context.Context, req fence.Request) (fence.Claim, error) {
		c, err := s.TryAcquire(ctx, req)
		if err != nil {
			return nil, err
		}
		return wrap(req, c), nil
	}
}

// tryAcquireWaits waits in TryAcquire until the key is free.
func tryAcquireWaits(b *base) fence.Driver {
	return &mutant{Store: b.store, tryAcquire: func(ctx context.Context, req fence.Request) (fence.Claim, error) {
		for {
			c, err := b.store.TryAcquire(ctx, req)
			if !errors.Is(err, fence.ErrHeld) {
				return c, err
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}}
}

// grantsHeldKey grants a held lock to a second owner, with a token of its
// own.
func grantsHeldKey(b *base) fence.Driver {
	var mu sync.Mutex
	var extra int64 = 1 << 40
	return &mutant{Store: b.store, tryAcquire: func(ctx context.Context, req fence.Request) (fence.Claim, error) {
		c, err := b.store.TryAcquire(ctx, req)
		if !errors.Is(err, fence.ErrHeld) || req.Kind != fence.KindLock {
			return c, err
		}
		mu.Lock()
		extra++
		tok := extra
		mu.Unlock()
		nop := func(context.Context) error { return nil }
		return &mutantClaim{Claim: nil, token: tok, release: nop,
			extend: func(context.Context, time.Duration) error { return nil }}, nil
	}}
}

// heldNamesNobody refuses a held key without naming its holder.
func heldNamesNobody(b *base) fence.Driver { return answersHeld(b, fence.ErrHeld) }

// answersHeld answers every refusal matching target with a *HeldError
// that names no holder.
func answersHeld(b *base, target error) fence.Driver {
	return &mutant{Store: b.store, tryAcquire: func(ctx context.Context, req fence.Request) (fence.Claim, error) {
		c, err := b.store.TryAcquire(ctx, req)
		if errors.Is(err, target) {
			return nil, &fence.HeldError{Key: req.Key}
		}
		return c, err
	}}
}

// shortGrant grants half the TTL asked.
func shortGrant(b *base) fence.Driver {
	return &mutant{Store: b.store, tryAcquire: func(ctx context.Context, req fence.Request) (fence.Claim, error) {
		req.TTL /= 2
		return b.store.TryAcquire(ctx, req)
	}}
}

// shortExtend extends by half the TTL asked.
func shortExtend(b *base) fence.Driver {
	return &mutant{Store: b.store, tryAcquire: claims(b.store, func(_ fence.Request, c fence.Claim) fence.Claim {
		return &mutantClaim{Claim: c, extend: func(ctx context.Context, ttl time.Duration) error {
			return c.Extend(ctx, ttl/2)
		}}
	})}
}

// extendNeverRefuses reports success from every Extend, held or not (a
// compare-and-extend without the compare would fail only where the key
// is free; this one never does, so that no timing decides the catch).
func extendNeverRefuses(b *base) fence.Driver {
	return &mutant{Store: b.store, tryAcquire: claims(b.store, func(_ fence.Request, c fence.Claim) fence.Claim {
		return &mutantClaim{Claim: c, extend: func(ctx context.Context, ttl time.Duration) error {
			_ = c.Extend(ctx, ttl)
			return nil
		}}
	})}
}

// releaseAnyway deletes the key on release whoever holds it.
func releaseAnyway(b *base) fence.Driver {
	return &mutant{Store: b.store, tryAcquire: claims(b.store, func(req fence.Request, c fence.Claim) fence.Claim {
		return &mutantClaim{Claim: c, release: func(context.Context) error {
			b.store.Delete(req.Key)
			return nil
		}}
	})}
}

// releaseNeverRefuses deletes only its own lease, but reports success
// from every Release, held or not.
func releaseNeverRefuses(b *base) fence.Driver {
	return &mutant{Store: b.store, tryAcquire: claims(b.store, func(_ fence.Request, c fence.Claim) fence.Claim {
		return &mutantClaim{Claim: c, release: func(ctx context.Context) error {
			_ = c.Release(ctx)
			return nil
		}}
	})}
}

// leaseOutlivesTTL grants and extends a thousand times the TTL asked.
func leaseOutlivesTTL(b *base) fence.Driver {
	const more = 1000
	return &mutant{Store: b.store, tryAcquire: func(ctx context.Context, req fence.Request) (fence.Claim, error) {
		req.TTL *= more
		c, err := b.store.TryAcquire(ctx, req)
		if err != nil {
			return nil, err
		}
		return &mutantClaim{Claim: c, extend: func(ctx context.Context, ttl time.Duration) error {
			return c.Extend(ctx, ttl*more)
		}}, nil
	}}
}

// longKeysCut cuts keys to 250 bytes, as a store with that limit would
// if its driver did not hash long keys.
func longKeysCut(b *base) fence.Driver {
	return &mutant{Store: b.store, tryAcquire: func(ctx context.Context, req fence.Request) (fence.Claim, error) {
		req.Key = req.Key[:min(len(req.Key), 250)]
		return b.store.TryAcquire(ctx, req)
	}}
}

// limitMismatchHidden answers a request whose limit disagrees with the
// holders' as if the semaphore were full.
func limitMismatchHidden(b *base) fence.Driver { return answersHeld(b, fence.ErrLimitMismatch) }

// tokens numbers a driver's grants itself, per key and kind (readers and
// writers share one sequence unless apart).
type tokens struct {
	mu    sync.Mutex
	next  map[string]int64
	apart bool // readers and writers count apart
}

func (tk *tokens) space(req fence.Request) string {
	k := req.Kind
	if k == fence.KindRead && !tk.apart {
		k = fence.KindWrite
	}
	return fmt.Sprint(k, "/", req.Key)
}

func (tk *tokens) issue(req fence.Request) int64 {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	tk.next[tk.space(req)]++
	return tk.next[tk.space(req)]
}

// tokenResets numbers acquisitions from 1 again after every release.
func tokenResets(b *base) fence.Driver {
	tk := &tokens{next: map[string]int64{}}
	return &mutant{Store: b.store, tryAcquire: claims(b.store, func(req fence.Request, c fence.Claim) fence.Claim {
		return &mutantClaim{Claim: c, token: tk.issue(req), release: func(ctx context.Context) error {
			tk.mu.Lock()
			delete(tk.next, tk.space(req))
			tk.mu.Unlock()
			return c.Release(ctx)
		}}
	})}
}

// tokensRepeatAfterExpiry gives the next holder of a key whose holder did
// not release it (it expired, or was taken away) the same token again.
func tokensRepeatAfterExpiry(b *base) fence.Driver {
	tk := &tokens{next: map[string]int64{}}
	released := map[string]bool{}
	return &mutant{Store: b.store, tryAcquire: claims(b.store, func(req fence.Request, c fence.Claim) fence.Claim {
		sp := tk.space(req)
		tk.mu.Lock()
		if n, ok := tk.next[sp]; ok && !released[sp] && req.Kind == fence.KindLock {
			tk.next[sp] = n - 1
		}
		released[sp] = false
		tk.mu.Unlock()
		tok := tk.issue(req)
		return &mutantClaim{Claim: c, token: tok, release: func(ctx context.Context) error {
			tk.mu.Lock()
			released[sp] = true
			tk.mu.Unlock()
			return c.Release(ctx)
		}}
	})}
}

// tokensNegative issues every token negated: never positive.
func tokensNegative(b *base) fence.Driver {
	return &mutant{Store: b.store, tryAcquire: claims(b.store, func(_ fence.Request, c fence.Claim) fence.Claim {
		return &mutantClaim{Claim: c, token: -c.Token()}
	})}
}

// stateLossResets numbers grants from 1 again once the store lost the key.
func stateLossResets(b *base) fence.Driver {
	tk := &tokens{next: map[string]int64{}}
	b.wipe = func(_ context.Context, key string) error {
		b.store.Delete(key)
		tk.mu.Lock()
		defer tk.mu.Unlock()
		for _, k := range []fence.Kind{fence.KindLock, fence.KindSemaphore, fence.KindRead, fence.KindWrite} {
			delete(tk.next, tk.space(fence.Request{Key: key, Kind: k}))
		}
		return nil
	}
	return &mutant{Store: b.store, tryAcquire: claims(b.store, func(req fence.Request, c fence.Claim) fence.Claim {
		return &mutantClaim{Claim: c, token: tk.issue(req)}
	})}
}

// refusalLeavesLease refuses large metadata, after taking the key.
func refusalLeavesLease(b *base) fence.Driver {
	return &mutant{Store: b.store, tryAcquire: func(ctx context.Context, req fence.Request) (fence.Claim, error) {
		c, err := b.store.TryAcquire(ctx, req)
		if err == nil && len(req.Meta["big"]) > 0 {
			return nil, fmt.Errorf("%w: metadata too large", fence.ErrInvalidOption)
		}
		return c, err
	}}
}

// ttlCapped grants at most a minute, whatever the TTL asked.
func ttlCapped(b *base) fence.Driver {
	return &mutant{Store: b.store, tryAcquire: func(ctx context.Context, req fence.Request) (fence.Claim, error) {
		req.TTL = min(req.TTL, time.Minute)
		return b.store.TryAcquire(ctx, req)
	}}
}

// kindsShare takes every kind as the key's lock.
func kindsShare(b *base) fence.Driver {
	return &mutant{Store: b.store, tryAcquire: func(ctx context.Context, req fence.Request) (fence.Claim, error) {
		req.Kind, req.Limit = fence.KindLock, 0
		return b.store.TryAcquire(ctx, req)
	}}
}

// semaphoreOneMore admits one holder more than the limit.
func semaphoreOneMore(b *base) fence.Driver {
	return &mutant{Store: b.store, tryAcquire: func(ctx context.Context, req fence.Request) (fence.Claim, error) {
		if req.Kind == fence.KindSemaphore {
			req.Limit++
		}
		return b.store.TryAcquire(ctx, req)
	}}
}

// writerNotPreferred refuses a writer while readers hold without leaving
// the mark that keeps new readers out.
func writerNotPreferred(b *base) fence.Driver {
	var mu sync.Mutex
	readers := map[string]int{}
	return &mutant{Store: b.store, tryAcquire: func(ctx context.Context, req fence.Request) (fence.Claim, error) {
		switch req.Kind {
		case fence.KindWrite:
			mu.Lock()
			n := readers[req.Key]
			mu.Unlock()
			if n > 0 {
				return nil, &fence.HeldError{Key: req.Key}
			}
		case fence.KindRead:
			c, err := b.store.TryAcquire(ctx, req)
			if err != nil {
				return nil, err
			}
			mu.Lock()
			readers[req.Key]++
			mu.Unlock()
			var once sync.Once
			return &mutantClaim{Claim: c, release: func(ctx context.Context) error {
				once.Do(func() {
					mu.Lock()
					readers[req.Key]--
					mu.Unlock()
				})
				return c.Release(ctx)
			}}, nil
		}
		return b.store.TryAcquire(ctx, req)
	}}
}

// writerTokensApart numbers writers and readers apart, so that a writer's
// token can be below the readers' before it.
func writerTokensApart(b *base) fence.Driver {
	tk := &tokens{next: map[string]int64{}, apart: true}
	return &mutant{Store: b.store, tryAcquire: claims(b.store, func(req fence.Request, c fence.Claim) fence.Claim {
		return &mutantClaim{Claim: c, token: tk.issue(req)}
	})}
}

// deafWatch never reports a release.
func deafWatch(b *base) fence.Driver {
	return &mutant{Store: b.store, watch: func(ctx context.Context, key string) (<-chan struct{}, error) {
		return make(chan struct{}), nil
	}}
}

// inspectWrongHolder names an earlier token and another owner.
func inspectWrongHolder(b *base) fence.Driver {
	return &mutant{Store: b.store, inspect: func(ctx context.Context, key string) (fence.Holder, error) {
		h, err := b.store.Inspect(ctx, key)
		h.Owner, h.Token = "someone-else", h.Token-1
		return h, err
	}}
}

// inspectLosesMeta returns the metadata without the caller's fields.
func inspectLosesMeta(b *base) fence.Driver {
	return &mutant{Store: b.store, inspect: func(ctx context.Context, key string) (fence.Holder, error) {
		h, err := b.store.Inspect(ctx, key)
		if h.Meta != nil {
			h.Meta = map[string]string{"host": h.Meta["host"]}
		}
		return h, err
	}}
}

// inspectFreeHeld answers Inspect of a free key with an empty holder.
func inspectFreeHeld(b *base) fence.Driver {
	return &mutant{Store: b.store, inspect: func(ctx context.Context, key string) (fence.Holder, error) {
		h, err := b.store.Inspect(ctx, key)
		if errors.Is(err, fence.ErrNotHeld) {
			return fence.Holder{Key: key}, nil
		}
		return h, err
	}}
}

// listAll lists every held key, whatever the prefix.
func listAll(b *base) fence.Driver {
	return &mutant{Store: b.store, list: func(ctx context.Context, _ string) ([]fence.Holder, error) {
		return b.store.List(ctx, "")
	}}
}

// listUnsorted lists in reverse key order.
func listUnsorted(b *base) fence.Driver {
	return &mutant{Store: b.store, list: func(ctx context.Context, prefix string) ([]fence.Holder, error) {
		hs, err := b.store.List(ctx, prefix)
		slices.Reverse(hs)
		return hs, err
	}}
}

// waitersMiscounted counts one waiter too few.
func waitersMiscounted(b *base) fence.Driver {
	return &mutant{Store: b.store, waiters: func(ctx context.Context, key string) (int, error) {
		n, err := b.store.Waiters(ctx, key)
		return max(n-1, 0), err
	}}
}

// skipHolderPlainError refuses a held key with a plain error, not a
// *HeldError, when the caller said it needs no holder.
func skipHolderPlainError(b *base) fence.Driver {
	return skipHolderBroken{b.sess}
}

type skipHolderBroken struct{ *sessionDriver }

func (d skipHolderBroken) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	c, err := d.sessionDriver.TryAcquire(ctx, req)
	if req.SkipHolder && errors.Is(err, fence.ErrHeld) {
		return nil, fmt.Errorf("%q is taken", req.Key)
	}
	return c, err
}

// notifierNeverFires registers the loss function and never calls it.
func notifierNeverFires(b *base) fence.Driver {
	b.sess.wrap = func(s *session) fence.Claim { return deafNotifier{s} }
	return b.sess
}

type deafNotifier struct{ *session }

func (deafNotifier) NotifyLost(func(error)) {}

// lossReportedLate calls the loss function only seconds after the
// session is gone: later than the suite's bound for a prompt report (3/4
// of the ten suite TTLs the check's lease has).
func lossReportedLate(b *base) fence.Driver {
	b.sess.wrap = func(s *session) fence.Claim { return slowNotifier{s} }
	return b.sess
}

type slowNotifier struct{ *session }

func (c slowNotifier) NotifyLost(f func(error)) {
	c.session.NotifyLost(func(err error) { time.AfterFunc(4*time.Second, func() { f(err) }) })
}

// notifierMissesEarlyLoss registers the loss function, but never hands
// it a loss that came before.
func notifierMissesEarlyLoss(b *base) fence.Driver {
	b.sess.wrap = func(s *session) fence.Claim { return lateNotifier{s} }
	return b.sess
}

type lateNotifier struct{ *session }

func (c lateNotifier) NotifyLost(f func(error)) {
	c.mu.Lock()
	c.notify = f
	c.mu.Unlock()
}

// semaphoreLossUnreported hands out semaphore claims that report no loss.
func semaphoreLossUnreported(b *base) fence.Driver {
	b.sess.wrap = func(s *session) fence.Claim {
		if s.kind == fence.KindSemaphore {
			return plainClaim{s}
		}
		return s
	}
	return b.sess
}

// plainClaim hides a session's loss report.
type plainClaim struct{ s *session }

func (c plainClaim) Token() int64                                        { return c.s.Token() }
func (c plainClaim) Extend(ctx context.Context, ttl time.Duration) error { return c.s.Extend(ctx, ttl) }
func (c plainClaim) Release(ctx context.Context) error                   { return c.s.Release(ctx) }

// semaphoreSlotKept reports a semaphore holder's killed session but keeps
// its slot taken until its TTL runs out.
func semaphoreSlotKept(b *base) fence.Driver {
	b.sess.killKeeps = func(k fence.Kind) bool { return k == fence.KindSemaphore }
	return b.sess
}

// cancelLeavesRequest leaves a cancelled wait's request in the "store",
// which grants it at the next release, as a lock call left queued in a
// server would.
func cancelLeavesRequest(b *base) fence.Driver {
	var mu sync.Mutex
	pending := map[string]fence.Request{}
	b.sess.onCancel = func(req fence.Request) {
		mu.Lock()
		pending[req.Key] = req
		mu.Unlock()
	}
	b.sess.afterRelease = func(key string) {
		mu.Lock()
		req, ok := pending[key]
		delete(pending, key)
		mu.Unlock()
		if ok {
			_, _ = b.store.TryAcquire(context.Background(), req)
		}
	}
	return b.sess
}

// cancelledWriterStays leaves a writer's cancelled wait queued in the
// "store", as a lock call left pending in a server would: new readers
// stay out behind it as behind a waiting writer, until the store grants
// it (to nobody) once the readers are gone.
func cancelledWriterStays(b *base) fence.Driver {
	var mu sync.Mutex
	pending := map[string]fence.Request{}
	b.sess.onCancel = func(req fence.Request) {
		if req.Kind == fence.KindWrite {
			mu.Lock()
			pending[req.Key] = req
			mu.Unlock()
		}
	}
	b.sess.refuse = func(req fence.Request) bool {
		mu.Lock()
		defer mu.Unlock()
		_, queued := pending[req.Key]
		return queued && req.Kind == fence.KindRead
	}
	b.sess.afterRelease = func(key string) {
		mu.Lock()
		defer mu.Unlock()
		if req, ok := pending[key]; ok {
			if _, err := b.store.TryAcquire(context.Background(), req); err == nil {
				delete(pending, key)
			}
		}
	}
	return b.sess
}

// writerMarkStays keeps new readers out once a writer was refused, until
// a writer is granted: the mark of a writer that gave up never lapses.
func writerMarkStays(b *base) fence.Driver {
	var mu sync.Mutex
	marked := map[string]bool{}
	return &mutant{Store: b.store, tryAcquire: func(ctx context.Context, req fence.Request) (fence.Claim, error) {
		mu.Lock()
		defer mu.Unlock()
		if req.Kind == fence.KindRead && marked[req.Key] {
			return nil, &fence.HeldError{Key: req.Key}
		}
		c, err := b.store.TryAcquire(ctx, req)
		if req.Kind == fence.KindWrite {
			marked[req.Key] = errors.Is(err, fence.ErrHeld)
		}
		return c, err
	}}
}

// reusesDeadSession is one client's driver with a session of its own (the
// claims it got), which it keeps using once the store killed it: every
// later acquisition fails, as a client that never opens a new session
// after its old one expired.
func reusesDeadSession(b *base) fence.Driver {
	return &deadSessionDriver{sessionDriver: b.sess}
}

type deadSessionDriver struct {
	*sessionDriver

	mu   sync.Mutex
	mine []*session
}

// dead returns an error once the store killed a session of this client.
func (d *deadSessionDriver) dead() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.mine {
		if err := s.err(); err != nil {
			return fmt.Errorf("session expired (%v)", err)
		}
	}
	return nil
}

func (d *deadSessionDriver) keep(c fence.Claim, err error) (fence.Claim, error) {
	if s, ok := c.(*session); ok {
		d.mu.Lock()
		d.mine = append(d.mine, s)
		d.mu.Unlock()
	}
	return c, err
}

func (d *deadSessionDriver) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	if err := d.dead(); err != nil {
		return nil, err
	}
	return d.keep(d.sessionDriver.TryAcquire(ctx, req))
}

func (d *deadSessionDriver) Acquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	if err := d.dead(); err != nil {
		return nil, err
	}
	return d.keep(d.sessionDriver.Acquire(ctx, req))
}

// outageNotMarked answers an outage with an error that does not match
// fence.ErrUnavailable: a waiting Acquire fails at once.
func outageNotMarked(b *base) fence.Driver {
	b.sess.unmarked = true
	return b.sess
}
