package fence_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

// oneByOne is a fencemem.Store without its MultiAcquirer: the Client
// takes the keys of AcquireAll one by one.
type oneByOne struct{ s *fencemem.Store }

func (o oneByOne) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	return o.s.TryAcquire(ctx, req)
}
func (o oneByOne) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	return o.s.Watch(ctx, key)
}
func (o oneByOne) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	return o.s.Inspect(ctx, key)
}
func (o oneByOne) SupportsLockDelay(k fence.Kind) bool { return o.s.SupportsLockDelay(k) }

// multiPaths runs f once over a fencemem.Store (atomic AcquireAll) and once
// over the same store taken one key at a time.
func multiPaths(t *testing.T, f func(t *testing.T, s *fencemem.Store, drv fence.Driver)) {
	t.Run("Atomic", func(t *testing.T) {
		s := fencemem.New()
		f(t, s, s)
	})
	t.Run("OneByOne", func(t *testing.T) {
		s := fencemem.New()
		f(t, s, oneByOne{s})
	})
}

func TestAcquireAllOverlappingOrdersNeverDeadlock(t *testing.T) {
	multiPaths(t, func(t *testing.T, s *fencemem.Store, drv fence.Driver) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			const rounds = 100
			var (
				mu     sync.Mutex
				inside = map[string]string{} // key -> caller holding it
				wg     sync.WaitGroup
			)
			caller := func(name string, keys []string) {
				defer wg.Done()
				c := fence.New(drv, fence.WithTTL(time.Second))
				for i := range rounds {
					set, err := c.AcquireAll(ctx, keys)
					if err != nil {
						t.Errorf("%s round %d: %v", name, i, err)
						return
					}
					mu.Lock()
					for _, k := range keys {
						if other := inside[k]; other != "" {
							t.Errorf("%s got %q while %s holds it", name, k, other)
						}
						inside[k] = name
					}
					mu.Unlock()
					time.Sleep(time.Millisecond)
					mu.Lock()
					for _, k := range keys {
						delete(inside, k)
					}
					mu.Unlock()
					if err := set.Release(ctx); err != nil {
						t.Errorf("%s release: %v", name, err)
					}
				}
			}
			wg.Add(3)
			go caller("ab", []string{"a", "b"})
			go caller("ba", []string{"b", "a"})
			go caller("cb", []string{"c", "b"})
			wg.Wait()
			if ctx.Err() != nil {
				t.Fatal("callers did not finish within an hour of virtual time")
			}
		})
	})
}

func TestAcquireAllAllOrNone(t *testing.T) {
	multiPaths(t, func(t *testing.T, s *fencemem.Store, drv fence.Driver) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			third := fence.New(drv, fence.WithTTL(time.Second))
			held, err := third.TryAcquire(ctx, "b")
			if err != nil {
				t.Fatal(err)
			}
			c := fence.New(drv, fence.WithTTL(time.Second))
			keys := []string{"c", "b", "a"}
			checkNone := func(what string, err error) {
				t.Helper()
				var he *fence.HeldError
				if !errors.As(err, &he) || he.Key != "b" {
					t.Fatalf("%s: %v; want the *HeldError of b", what, err)
				}
				for _, k := range []string{"a", "c"} {
					if h, err := s.Inspect(ctx, k); !errors.Is(err, fence.ErrNotHeld) {
						t.Errorf("%s: %q left held (%+v, %v)", what, k, h, err)
					}
				}
				if h, err := s.Inspect(ctx, "b"); err != nil || h.Owner != held.Owner() {
					t.Errorf("%s: b is %+v, %v; want the third party's", what, h, err)
				}
			}
			_, err = c.TryAcquireAll(ctx, keys)
			checkNone("TryAcquireAll", err)
			start := time.Now()
			_, err = c.AcquireAll(ctx, keys, fence.WithWait(5*time.Second))
			checkNone("AcquireAll", err)
			if waited := time.Since(start); waited != 5*time.Second {
				t.Errorf("AcquireAll waited %v; want the wait timeout 5s", waited)
			}

			// Released, b goes to the waiting AcquireAll with every other key.
			// While it waits for b, it holds no key sorted after b.
			go func() {
				time.Sleep(time.Second)
				if h, err := s.Inspect(ctx, "c"); !errors.Is(err, fence.ErrNotHeld) {
					t.Errorf("c held (%+v, %v) while AcquireAll waits for b", h, err)
				}
				time.Sleep(time.Second)
				held.Release(ctx)
			}()
			start = time.Now()
			set, err := c.AcquireAll(ctx, keys)
			if err != nil {
				t.Fatal(err)
			}
			if waited := time.Since(start); waited != 2*time.Second {
				t.Errorf("AcquireAll got the keys after %v; want 2s, at b's release", waited)
			}
			for i, l := range set.Leases() {
				if want := []string{"a", "b", "c"}[i]; l.Key() != want || set.Lease(want) != l {
					t.Errorf("lease %d is %q; want %q", i, l.Key(), want)
				}
				if h, err := s.Inspect(ctx, l.Key()); err != nil || h.Token != l.Token() || h.Owner != l.Owner() {
					t.Errorf("%q in the store: %+v, %v; want token %d of %s", l.Key(), h, err, l.Token(), l.Owner())
				}
			}
			if set.Lease("d") != nil {
				t.Error("Lease of a key not in the set is not nil")
			}
			if err := set.Release(ctx); err != nil {
				t.Fatal(err)
			}
			if err := set.Release(ctx); !errors.Is(err, fence.ErrReleased) {
				t.Errorf("second Release: %v; want ErrReleased", err)
			}
			if !errors.Is(set.Err(), fence.ErrReleased) {
				t.Errorf("set.Err() = %v; want ErrReleased", set.Err())
			}
			for _, k := range keys {
				if _, err := s.Inspect(ctx, k); !errors.Is(err, fence.ErrNotHeld) {
					t.Errorf("%q held after Release: %v", k, err)
				}
			}
		})
	})
}

func TestAcquireAllLossEndsTheSet(t *testing.T) {
	multiPaths(t, func(t *testing.T, s *fencemem.Store, drv fence.Driver) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			c := fence.New(drv, fence.WithTTL(3*time.Second))
			set, err := c.AcquireAll(ctx, []string{"a", "b", "c"})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(5 * time.Second) // renewed meanwhile
			if err := set.Err(); err != nil {
				t.Fatalf("set ended while renewed: %v", err)
			}
			s.Delete("b")
			select {
			case <-set.Done():
			case <-time.After(2 * time.Second):
				t.Fatal("set still valid a renew interval after b was taken away")
			}
			var lost *fence.LostError
			if !errors.As(set.Err(), &lost) || lost.Key != "b" || lost.Token != set.Lease("b").Token() {
				t.Fatalf("set.Err() = %v; want b's *LostError", set.Err())
			}
			if !errors.Is(context.Cause(set.Context()), lost) {
				t.Errorf("the set's context cause is %v", context.Cause(set.Context()))
			}
			if set.Lease("a").Err() != nil || set.Lease("c").Err() != nil {
				t.Error("a or c ended with b")
			}
			err = set.Release(ctx)
			if !errors.As(err, &lost) || lost.Key != "b" {
				t.Errorf("Release: %v; want b's *LostError", err)
			}
			if _, err := c.TryAcquireAll(ctx, []string{"a", "c"}); err != nil {
				t.Errorf("a and c not free after the set's release: %v", err)
			}
		})
	})
}

func TestAcquireAllRefusesBadKeys(t *testing.T) {
	ctx := context.Background()
	c := fence.New(fencemem.New())
	for _, keys := range [][]string{nil, {}, {"a", "b", "a"}, {"a", ""}} {
		if _, err := c.AcquireAll(ctx, keys); !errors.Is(err, fence.ErrInvalidKey) {
			t.Errorf("AcquireAll(%q): %v; want ErrInvalidKey", keys, err)
		}
		if _, err := c.TryAcquireAll(ctx, keys); !errors.Is(err, fence.ErrInvalidKey) {
			t.Errorf("TryAcquireAll(%q): %v; want ErrInvalidKey", keys, err)
		}
	}
	if _, err := c.TryAcquireAll(ctx, []string{"a"}, fence.WithWait(time.Second)); !errors.Is(err, fence.ErrInvalidOption) {
		t.Errorf("TryAcquireAll with WithWait: %v; want ErrInvalidOption", err)
	}
	if _, err := c.AcquireAll(ctx, []string{"a"}, fence.WithTTL(time.Millisecond)); !errors.Is(err, fence.ErrInvalidTTL) {
		t.Errorf("AcquireAll with a 1ms TTL: %v; want ErrInvalidTTL", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AcquireAll(ctx, []string{"a"}); !errors.Is(err, fence.ErrClosed) {
		t.Errorf("AcquireAll after Close: %v; want ErrClosed", err)
	}
}

// partial is a MultiAcquirer that falls back: it says it cannot take the
// keys in one step, as a Redis Cluster store does for keys in different
// slots.
type partial struct{ oneByOne }

func (p partial) TryAcquireAll(context.Context, []fence.Request) ([]fence.Claim, error) {
	return nil, fmt.Errorf("%w: not in one step", fence.ErrUnsupported)
}

func TestAcquireAllFallsBackOneByOne(t *testing.T) {
	ctx := context.Background()
	s := fencemem.New()
	c := fence.New(partial{oneByOne{s}})
	set, err := c.AcquireAll(ctx, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	if err := set.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// While AcquireAll waits for a key, it holds no key sorted after it: one
// it kept from an earlier wait goes back first.
func TestAcquireAllWaitsHoldingOnlyEarlierKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := fencemem.New()
		others := fence.New(s, fence.WithTTL(time.Minute))
		b, err := others.TryAcquire(ctx, "b")
		if err != nil {
			t.Fatal(err)
		}
		c := fence.New(s, fence.WithTTL(time.Minute))
		done := make(chan *fence.LeaseSet)
		go func() {
			set, err := c.AcquireAll(ctx, []string{"a", "b"})
			if err != nil {
				t.Error(err)
			}
			done <- set
		}()
		synctest.Wait() // waiting for b
		a, err := others.TryAcquire(ctx, "a")
		if err != nil {
			t.Fatal(err)
		}
		b.Release(ctx) // the waiter takes b, then finds a held
		synctest.Wait()
		if h, err := s.Inspect(ctx, "b"); !errors.Is(err, fence.ErrNotHeld) {
			t.Fatalf("b held (%+v, %v) while AcquireAll waits for a", h, err)
		}
		a.Release(ctx)
		set := <-done
		if err := set.Release(ctx); err != nil {
			t.Fatal(err)
		}
	})
}
