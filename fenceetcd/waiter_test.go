package fenceetcd_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceetcd"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// longTTL is the fence command's default TTL: its sessions last 90 s, far
// beyond what a dead waiter may cost.
const longTTL = 60 * time.Second

// The environment of a waiter process (see runWaiterProcess).
const (
	envWaiterEndpoints = "FENCEETCD_TEST_WAITER_ENDPOINTS"
	envWaiterKey       = "FENCEETCD_TEST_WAITER_KEY"
	envWaiterKind      = "FENCEETCD_TEST_WAITER_KIND"
)

// acquireKind acquires key as kind "lock" or "semaphore" (limit 1).
func acquireKind(ctx context.Context, c *fence.Client, kind, key string, opts ...fence.AcquireOption) (*fence.Lease, error) {
	if kind == "semaphore" {
		return c.Semaphore(key, 1, opts...).Acquire(ctx)
	}
	return c.Acquire(ctx, key, opts...)
}

// runWaiterProcess is the body of the waiter process: it waits for the
// key until it is killed.
func runWaiterProcess(t *testing.T) {
	cli := newClient(t, strings.Split(os.Getenv(envWaiterEndpoints), ","))
	d := fenceetcd.New(cli)
	defer d.Close()
	c := fence.New(d, fence.WithTTL(longTTL))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // if never killed
	defer cancel()
	l, err := acquireKind(ctx, c, os.Getenv(envWaiterKind), os.Getenv(envWaiterKey))
	if err == nil {
		t.Errorf("waiter process got the key (token %d); it was to be killed while waiting", l.Token())
	}
}

// TestDeadWaiterDelaysOthersBriefly kills (SIGKILL) a process that waits
// for a held key with the command's default TTL, so that it cannot delete
// its queue entry: once the holder leaves, the next contender must get the
// key within seconds (the waiter lease), not after the dead waiter's
// session (90 s), and Inspect must never name the dead waiter as holder.
func TestDeadWaiterDelaysOthersBriefly(t *testing.T) {
	if os.Getenv(envWaiterKey) != "" {
		runWaiterProcess(t)
		return
	}
	srv := testserver.Etcd(t)
	for _, kind := range []string{"lock", "semaphore"} {
		t.Run(kind, func(t *testing.T) {
			ctx := ctxT(t)
			key := "dead-waiter-" + kind
			cli := newClient(t, srv.Endpoints())
			d := newDriver(t, srv.Endpoints())
			dir := d.Dir(key)
			if kind == "semaphore" {
				dir = strings.TrimSuffix(dir, "/") + "%sem/"
			}
			// queued waits until the queue holds n entries, the last one
			// waiting (not the entry a semaphore's TryAcquire puts and
			// deletes again before the wait).
			queued := func(n int) {
				t.Helper()
				deadline := time.Now().Add(20 * time.Second)
				for {
					resp, err := cli.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
					if err != nil {
						t.Fatal(err)
					}
					var e struct{ Waiting bool }
					if len(resp.Kvs) == n && json.Unmarshal(resp.Kvs[n-1].Value, &e) == nil && e.Waiting {
						return
					}
					if time.Now().After(deadline) {
						t.Fatalf("queue %s: %d entries; want %d, the last one waiting", dir, len(resp.Kvs), n)
					}
					time.Sleep(10 * time.Millisecond)
				}
			}
			holder := newFence(t, d, fence.WithTTL(longTTL))
			held, err := acquireKind(ctx, holder, kind, key)
			if err != nil {
				t.Fatal(err)
			}

			waiter := testserver.Rerun(t,
				envWaiterEndpoints+"="+strings.Join(srv.Endpoints(), ","),
				envWaiterKey+"="+key,
				envWaiterKind+"="+kind)
			deadPID := strconv.Itoa(waiter.Pid())
			queued(2)
			waiter.Kill()

			next := newFence(t, newDriver(t, srv.Endpoints()), fence.WithTTL(longTTL))
			type result struct {
				l   *fence.Lease
				err error
			}
			got := make(chan result, 1)
			go func() {
				l, err := acquireKind(ctx, next, kind, key, fence.WithWait(30*time.Second))
				got <- result{l, err}
			}()
			queued(3) // behind the dead waiter
			if err := held.Release(ctx); err != nil {
				t.Fatal(err)
			}
			released := time.Now()
			tick := time.NewTicker(50 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case r := <-got:
					took := time.Since(released)
					if r.err != nil {
						t.Fatalf("next contender: %v after %v; waiter process output:\n%s", r.err, took, waiter.Output())
					}
					t.Logf("next contender got the key %v after the holder left", took)
					if took > 10*time.Second {
						t.Errorf("a dead waiter delayed the next contender by %v; want seconds, not its session's TTL", took)
					}
					if r.l.Token() <= held.Token() {
						t.Errorf("token %d after %d", r.l.Token(), held.Token())
					}
					mustReleaseLease(t, ctx, r.l)
					return
				case <-tick.C:
					if kind != "lock" {
						continue
					}
					h, err := holder.Inspect(ctx, key)
					switch {
					case err == nil && h.Meta["pid"] == deadPID:
						t.Fatalf("Inspect names the dead waiter (pid %s) as holder: %+v", deadPID, h)
					case err != nil && !errors.Is(err, fence.ErrNotHeld):
						t.Fatalf("Inspect: %v", err)
					}
				}
			}
		})
	}
}

func mustReleaseLease(t *testing.T, ctx context.Context, l *fence.Lease) {
	t.Helper()
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// queueKVs returns the entries of key's lock queue in queue order.
func queueKVs(t *testing.T, ctx context.Context, cli *clientv3.Client, d *fenceetcd.Store, key string) []*mvccpb.KeyValue {
	t.Helper()
	resp, err := cli.Get(ctx, d.Dir(key), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Kvs
}

// TestGrantedWaiterIsBoundToItsSession: a waiting entry is bound to a
// short waiter lease and marked as waiting; once granted it is bound to
// its session's lease, unmarked, with the same create revision (its
// token), so that the waiter lease's end no longer touches it.
func TestGrantedWaiterIsBoundToItsSession(t *testing.T) {
	srv := testserver.Etcd(t)
	ctx := ctxT(t)
	cli := newClient(t, srv.Endpoints())
	d := newDriver(t, srv.Endpoints())
	key := "rebind"
	a := newFence(t, d, fence.WithTTL(longTTL))
	held, err := a.TryAcquire(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	b := newFence(t, newDriver(t, srv.Endpoints()), fence.WithTTL(longTTL))
	got := make(chan *fence.Lease, 1)
	errc := make(chan error, 1)
	go func() {
		l, err := b.Acquire(ctx, key)
		if err != nil {
			errc <- err
			return
		}
		got <- l
	}()
	waitEntries(t, ctx, cli, d, key, 2)

	kv := queueKVs(t, ctx, cli, d, key)[1]
	waitLease := clientv3.LeaseID(kv.Lease)
	if ttl := grantedTTL(t, ctx, cli, waitLease); ttl > 5 {
		t.Errorf("waiting entry bound to a lease of %d s; want at most 5 s", ttl)
	}
	var e struct{ Waiting bool }
	if json.Unmarshal(kv.Value, &e); !e.Waiting {
		t.Errorf("waiting entry %s is not marked as waiting", kv.Value)
	}
	if h, err := a.Inspect(ctx, key); err != nil || h.Owner != held.Owner() {
		t.Errorf("Inspect while a waiter queues = %+v, %v; want the holder %s", h, err, held.Owner())
	}

	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	var l *fence.Lease
	select {
	case l = <-got:
	case err := <-errc:
		t.Fatalf("waiter: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("waiter did not get the key within 20s of its release")
	}
	kv = queueKVs(t, ctx, cli, d, key)[0]
	if want, err := d.TokenOf(ctx, kv.CreateRevision); err != nil || l.Token() != want {
		t.Errorf("granted waiter's token %d; want its entry's create revision plus the epoch's base, %d (%v)", l.Token(), want, err)
	}
	if clientv3.LeaseID(kv.Lease) == waitLease {
		t.Errorf("granted entry is still bound to the waiter lease")
	}
	if ttl := grantedTTL(t, ctx, cli, clientv3.LeaseID(kv.Lease)); ttl < int64(longTTL/time.Second) {
		t.Errorf("granted entry bound to a lease of %d s; want its session's (at least %v)", ttl, longTTL)
	}
	if h, err := a.Inspect(ctx, key); err != nil || h.Owner != l.Owner() || h.Token != l.Token() {
		t.Errorf("Inspect after the grant = %+v, %v; want owner %s token %d", h, err, l.Owner(), l.Token())
	}
	// The waiter lease's end no longer touches the granted entry.
	if _, err := cli.Revoke(ctx, waitLease); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := l.Err(); err != nil {
		t.Errorf("granted lease ended with its waiter lease: %v", err)
	}
	if n := len(entries(t, ctx, cli, d, key)); n != 1 {
		t.Errorf("queue has %d entries after the waiter lease was revoked; want the holder's", n)
	}
	mustReleaseLease(t, ctx, l)
}

func grantedTTL(t *testing.T, ctx context.Context, cli *clientv3.Client, id clientv3.LeaseID) int64 {
	t.Helper()
	resp, err := cli.TimeToLive(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	return resp.GrantedTTL
}
