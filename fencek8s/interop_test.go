package fencek8s_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencek8s"
)

// elector is a client-go LeaderElector on a LeaseLock, run until stop.
type elector struct {
	id      string
	le      *leaderelection.LeaderElector
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	started time.Time // when it last started leading
	stopped time.Time // when it last stopped leading
}

// The electors' timing: a lease of 2s, renewed every 0.3s, given up if not
// renewed within 1.5s.
const (
	electorLease = 2 * time.Second
	electorRenew = 1500 * time.Millisecond
	electorRetry = 300 * time.Millisecond
)

func startElector(t *testing.T, cs kubernetes.Interface, name, id string, releaseOnCancel bool) *elector {
	t.Helper()
	e := &elector{id: id, done: make(chan struct{})}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: name, Namespace: namespace},
			Client:     cs.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		},
		LeaseDuration:   electorLease,
		RenewDeadline:   electorRenew,
		RetryPeriod:     electorRetry,
		ReleaseOnCancel: releaseOnCancel,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(context.Context) {
				e.mu.Lock()
				e.started = time.Now()
				e.mu.Unlock()
			},
			OnStoppedLeading: func() {
				e.mu.Lock()
				e.stopped = time.Now()
				e.mu.Unlock()
			},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.le = le
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go func() {
		defer close(e.done)
		le.Run(ctx)
	}()
	t.Cleanup(e.stop)
	return e
}

// stop cancels the elector and waits for Run to return.
func (e *elector) stop() {
	e.cancel()
	<-e.done
}

// leading reports whether the elector leads and its OnStartedLeading
// callback has run: client-go calls it on a goroutine of its own after
// IsLeader turns true, so IsLeader alone may come first.
func (e *elector) leading() bool {
	return e.le.IsLeader() && !e.startedAt().IsZero()
}

func (e *elector) startedAt() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.started
}

func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClientGoThenFence: a client-go elector leads; fence sees it as the
// holder and does not take the Lease while it renews, takes it at once
// when it releases, and only a full lease duration after its last renewal
// when it stops renewing without releasing. Tokens grow across both.
func TestClientGoThenFence(t *testing.T) {
	s := startKube(t)
	cs := mustClientset(t, s)
	ctx := context.Background()
	locks := fence.New(fencek8s.New(mustClientset(t, s), namespace), fence.WithTTL(ttl))
	const name = "interop-a"

	e := startElector(t, cs, name, "elector-1", true)
	waitFor(t, "client-go elector leads", 10*time.Second, e.leading)
	_, err := locks.TryAcquire(ctx, name)
	var held *fence.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Owner != "elector-1" {
		t.Fatalf("TryAcquire while the elector leads: %v; want held by elector-1", err)
	}
	firstToken := held.Holder.Token
	if _, err := locks.Acquire(ctx, name, fence.WithWait(3*electorLease)); !errors.Is(err, fence.ErrHeld) {
		t.Fatalf("Acquire while the elector renews for %v: %v; want ErrHeld", 3*electorLease, err)
	}

	// Released (ReleaseOnCancel): fence gets it at once.
	e.stop()
	start := time.Now()
	l, err := locks.Acquire(ctx, name, fence.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > electorLease {
		t.Errorf("fence took %v to get a Lease the elector released", took)
	}
	if l.Token() <= firstToken {
		t.Errorf("fence's token %d after the elector's %d", l.Token(), firstToken)
	}
	fenceToken := l.Token()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}

	// An elector that stops without releasing (a crash, a pause).
	e2 := startElector(t, cs, name, "elector-2", false)
	waitFor(t, "second elector leads", 10*time.Second, e2.leading)
	h, err := locks.Inspect(ctx, name)
	if err != nil || h.Owner != "elector-2" || h.Token <= fenceToken {
		t.Fatalf("Inspect: %+v, %v; want elector-2 with a token above %d", h, err, fenceToken)
	}
	e2.stop()
	lastRenew := leaseRenewTime(t, cs, name)
	l, err = locks.Acquire(ctx, name, fence.WithWait(5*electorLease))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(ctx)
	// renewTime is the elector's clock, which is this machine's here.
	if gap := time.Since(lastRenew); gap < electorLease {
		t.Errorf("fence took the Lease %v after the elector's last renewal; want at least its lease duration %v", gap, electorLease)
	}
	if l.Token() <= h.Token {
		t.Errorf("fence's token %d after the elector's %d", l.Token(), h.Token)
	}
}

func leaseRenewTime(t *testing.T, cs kubernetes.Interface, name string) time.Time {
	t.Helper()
	l, err := cs.CoordinationV1().Leases(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || l.Spec.RenewTime == nil {
		t.Fatalf("get Lease %s: %v", name, err)
	}
	return l.Spec.RenewTime.Time
}

// TestFenceThenClientGo: a fence holder leads; a client-go elector does
// not lead while fence renews, leads soon after fence releases, and after
// a fence holder stops renewing it leads only once that holder's lease is
// lost on its own clock.
func TestFenceThenClientGo(t *testing.T) {
	s := startKube(t)
	cs := mustClientset(t, s)
	ctx := context.Background()
	locks := fence.New(fencek8s.New(mustClientset(t, s), namespace), fence.WithTTL(ttl))
	const name = "interop-b"

	l, err := locks.Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	e := startElector(t, cs, name, "elector-1", true)
	time.Sleep(3 * ttl)
	if e.le.IsLeader() {
		t.Fatalf("client-go elector leads while fence renews the Lease")
	}
	if got := e.le.GetLeader(); got != l.Owner() {
		t.Errorf("elector sees leader %q; want fence's owner %q", got, l.Owner())
	}
	released := time.Now()
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "elector leads after fence released", 10*time.Second, e.leading)
	t.Logf("elector led %v after fence released", e.startedAt().Sub(released))
	h, err := locks.Inspect(ctx, name)
	if err != nil || h.Token <= l.Token() {
		t.Fatalf("Inspect: %+v, %v; want the elector with a token above fence's %d", h, err, l.Token())
	}
	e.stop() // releases

	// A fence holder that stops renewing (paused): the elector leads only
	// after fence's lease is lost.
	l2, err := locks.Acquire(ctx, name, fence.WithoutRenewal(), fence.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if l2.Token() <= h.Token {
		t.Errorf("fence's token %d after the elector's %d", l2.Token(), h.Token)
	}
	e2 := startElector(t, cs, name, "elector-2", true)
	waitFor(t, "elector leads after fence's holder stopped renewing", 5*ttl, e2.leading)
	select {
	case <-l2.Done():
	default:
		t.Fatalf("elector leads while fence's lease (token %d) is still valid for %v", l2.Token(), l2.ValidFor())
	}
	if err := l2.Release(ctx); !errors.Is(err, fence.ErrLost) {
		t.Errorf("late Release of fence's expired lease: %v; want ErrLost", err)
	}
	if !e2.le.IsLeader() {
		t.Errorf("elector lost the lead to fence's late Release")
	}
}
