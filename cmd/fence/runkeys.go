package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fencing/fence"
)

// "fence run --keys": CMD runs under a lease on every key listed, taken
// all or none (Client.AcquireAll), and is stopped as soon as any of them
// is lost.

// holding is what "fence run" holds while CMD runs: the lease of --key (a
// *fence.Lease), or the leases of --keys (a keySet).
type holding interface {
	Key() string
	Token() int64
	AcquiredAt() time.Time
	Done() <-chan struct{}
	Err() error
	Release(ctx context.Context) error
}

// keySet is the leases of --keys as one holding.
type keySet struct{ *fence.LeaseSet }

// Key is the keys, comma-separated, for messages.
func (s keySet) Key() string {
	keys := make([]string, 0, len(s.Leases()))
	for _, l := range s.Leases() {
		keys = append(keys, l.Key())
	}
	return strings.Join(keys, ",")
}

// Token is 0: each key has its own (tokensOf).
func (s keySet) Token() int64 { return 0 }

// AcquiredAt is when the first of the leases was granted.
func (s keySet) AcquiredAt() time.Time {
	var first time.Time
	for _, l := range s.Leases() {
		if first.IsZero() || l.AcquiredAt().Before(first) {
			first = l.AcquiredAt()
		}
	}
	return first
}

// keysFlag defines --keys, parsed into a sorted list of distinct valid
// keys.
func keysFlag(fs *flag.FlagSet, p *[]string) {
	fs.Func("keys", "take every key in this comma-separated `list`, all or none, instead of one --key", func(v string) error {
		keys := strings.Split(v, ",")
		slices.Sort(keys)
		for i, k := range keys {
			if err := fence.ValidateKey(k); err != nil {
				return err
			}
			if i > 0 && keys[i-1] == k {
				return fmt.Errorf("key %q listed twice", k)
			}
		}
		*p = keys
		return nil
	})
}

// keyOfEvents is the key --json events carry: --key, or the keys of
// --keys comma-separated.
func keyOfEvents(f runFlags) string {
	if f.keys != nil {
		return strings.Join(f.keys, ",")
	}
	return f.key
}

// tokensOf returns the token of each key of a keySet, nil for a lease.
func tokensOf(l holding) map[string]int64 {
	s, ok := l.(keySet)
	if !ok {
		return nil
	}
	m := make(map[string]int64)
	for _, l := range s.Leases() {
		m[l.Key()] = l.Token()
	}
	return m
}

// describeTokens says the token of l for messages: "token 5", or
// "tokens a=5, b=9".
func describeTokens(l holding) string {
	s, ok := l.(keySet)
	if !ok {
		return fmt.Sprintf("token %d", l.Token())
	}
	var parts []string
	for _, l := range s.Leases() {
		parts = append(parts, fmt.Sprintf("%s=%d", l.Key(), l.Token()))
	}
	return "tokens " + strings.Join(parts, ", ")
}

// childEnv is what CMD learns of its lease from its environment:
// FENCE_KEY, FENCE_TOKEN and FENCE_OWNER for --key; for --keys,
// FENCE_KEYS (the keys, sorted, comma-separated), and FENCE_TOKENS and
// FENCE_OWNERS, each "key=value" per key in the same order,
// comma-separated (split each item at its last '=': keys may hold one).
func childEnv(l holding) []string {
	s, ok := l.(keySet)
	if !ok {
		lease := l.(*fence.Lease)
		return []string{"FENCE_KEY=" + lease.Key(), "FENCE_TOKEN=" + strconv.FormatInt(lease.Token(), 10),
			"FENCE_OWNER=" + lease.Owner()}
	}
	var keys, tokens, owners []string
	for _, l := range s.Leases() {
		keys = append(keys, l.Key())
		tokens = append(tokens, l.Key()+"="+strconv.FormatInt(l.Token(), 10))
		owners = append(owners, l.Key()+"="+l.Owner())
	}
	return []string{"FENCE_KEYS=" + strings.Join(keys, ","), "FENCE_TOKENS=" + strings.Join(tokens, ","),
		"FENCE_OWNERS=" + strings.Join(owners, ",")}
}

// runKeys takes every key of --keys, all or none, waiting as --wait and
// --no-wait say, and runs CMD under them.
func runKeys(ctx context.Context, st *store, f runFlags, opts []fence.AcquireOption, ev *events, sigs <-chan os.Signal) int {
	tctx, cancel := context.WithTimeout(ctx, storeTimeout)
	set, err := st.client.TryAcquireAll(tctx, f.keys, opts...)
	cancel()
	err = st.wrap(err)
	if waitsOn(err, f) {
		var sig os.Signal
		set, err, sig = waitForAll(ctx, st, f, opts, err, ev, sigs)
		if sig != nil {
			return interruptedWaiting(ev, sig, f.keys)
		}
	}
	if err != nil {
		var held *fence.HeldError
		if errors.As(err, &held) {
			reportHeld(ctx, st, held, f, ev)
			return exitHeld
		}
		return ev.fail(err)
	}
	ks := keySet{set}
	ev.emit(event{Event: "acquired", Store: st.url, Tokens: tokensOf(ks),
		Message: fmt.Sprintf("acquired %q with %s", f.keys, describeTokens(ks))}, false)
	return runHeld(ks, f, ev, sigs)
}

// waitForAll waits until every key of --keys is taken. It says once that
// it waits, naming the held key it found; it returns the signal that
// interrupted the wait, if one did.
func waitForAll(ctx context.Context, st *store, f runFlags, opts []fence.AcquireOption, heldErr error,
	ev *events, sigs <-chan os.Signal) (*fence.LeaseSet, error, os.Signal) {
	e := event{Event: "waiting", WaitedMS: int64p(0), Message: fmt.Sprintf("waiting for %q, all of them", f.keys)}
	var held *fence.HeldError
	switch {
	case errors.As(heldErr, &held):
		e.Message += fmt.Sprintf(": %q is held", held.Key)
		if h := held.Holder; h != nil {
			j := toJSON(*h, time.Now())
			e.Holder = &j
			e.Message += " by " + describe(*h, time.Now())
		}
	case storeTrouble(heldErr) != "":
		e.Message += ": " + storeTrouble(heldErr)
	}
	ev.emit(e, true)

	type result struct {
		set *fence.LeaseSet
		err error
	}
	res := make(chan result, 1)
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		set, err := st.client.AcquireAll(actx, f.keys, append(opts, fence.WithWait(f.wait))...)
		res <- result{set, err}
	}()
	for {
		select {
		case r := <-res:
			return r.set, st.wrap(r.err), nil
		case s := <-sigs:
			if !stops(s) {
				continue
			}
			cancel()
			if r := <-res; r.set != nil {
				_ = r.set.Release(context.Background())
			}
			return nil, nil, s
		}
	}
}
