package fencek8s_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencehttp"
	"github.com/fencing/fence/fencek8s"
)

// Environment of the mixed test's contender processes.
const (
	envMixedRole = "FENCEK8S_TEST_MIXED" // "fence" or "elector"
	envMixedID   = "FENCEK8S_TEST_ID"
)

const mixedLease = "mixed"

// runMixed is one contender of TestMixedFleet, until killed: a fence
// client that, holding the Lease, writes to the guarded resource every
// 100 ms with its token (checking its lease only after each write, as a
// worker in the middle of a step would), or a client-go LeaderElector.
func runMixed(role string) {
	cs, _, err := clientset(parseServer(os.Getenv(envHolder)))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	id := os.Getenv(envMixedID)
	ctx := context.Background()
	if role == "elector" {
		for { // a new elector each time one stops leading
			le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
				Lock: &resourcelock.LeaseLock{
					LeaseMeta:  metav1.ObjectMeta{Name: mixedLease, Namespace: namespace},
					Client:     cs.CoordinationV1(),
					LockConfig: resourcelock.ResourceLockConfig{Identity: id},
				},
				LeaseDuration: electorLease, RenewDeadline: electorRenew, RetryPeriod: electorRetry,
				Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}},
			})
			if err != nil {
				fmt.Println("error", err)
				os.Exit(1)
			}
			le.Run(ctx)
		}
	}
	c := fence.New(fencek8s.New(cs, namespace), fence.WithTTL(ttl), fence.WithOwner(id))
	for {
		l, err := c.Acquire(ctx, mixedLease, fence.WithWait(time.Minute))
		if err != nil {
			continue
		}
		for {
			time.Sleep(100 * time.Millisecond)
			req, _ := http.NewRequest(http.MethodPost, os.Getenv(envTarget), strings.NewReader(id))
			req.Header.Set(fencehttp.Header, strconv.FormatInt(l.Token(), 10))
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
			if l.Err() != nil {
				break
			}
		}
		_ = l.Release(ctx)
	}
}

// write is one write that reached the guarded resource.
type write struct {
	owner    string
	token    int64
	accepted bool
}

// TestMixedFleet runs 3 fence contenders and 3 client-go LeaderElectors
// on one Lease, each in its own process, for 30 s or more (see the
// rounds), freezing one of them past the lease duration every few
// seconds. From the Lease's history
// (a watch): no one takes the Lease while its last holder of the other
// kind may still count itself valid (a fence holder its TTL after its
// last renewal, an elector its lease duration), and no fence contender
// while any holder may (unless it released it); fence's tokens grow. From the guarded resource: every write of a fence
// holder with a token below one already written is refused.
func TestMixedFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("30 s; not in -short")
	}
	s := startKube(t)
	cs := mustClientset(t, s)
	ctx := ctxT(t)

	var mu sync.Mutex
	var writes []write
	var guard fence.MemoryGuard
	resource := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := fencehttp.ParseToken(r.Header)
		owner := readAll(r)
		mu.Lock() // the guard's order is the record's
		err := guard.Admit(r.Context(), "r", token)
		writes = append(writes, write{owner: owner, token: token, accepted: err == nil})
		mu.Unlock()
		if err != nil {
			w.WriteHeader(http.StatusConflict)
		}
	}))
	defer resource.Close()

	// The Lease's history, as the API server hands it out.
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	w, err := cs.CoordinationV1().Leases(namespace).Watch(wctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", mixedLease).String(),
	})
	if err != nil {
		t.Fatal(err)
	}
	var history []*coordinationv1.Lease
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for e := range w.ResultChan() {
			if l, ok := e.Object.(*coordinationv1.Lease); ok && (e.Type == watch.Added || e.Type == watch.Modified) {
				history = append(history, l)
			}
		}
	}()

	var procs []*exec.Cmd
	for i := range 6 {
		role := "fence"
		if i%2 == 1 {
			role = "elector"
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), envHolder+"="+s.String(), envTarget+"="+resource.URL,
			envMixedRole+"="+role, envMixedID+"="+fmt.Sprintf("%s-%d", role, i))
		cmd.Stderr = &prefixWriter{t: t}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
	}
	defer func() {
		for _, p := range procs {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}()

	// Each round freezes the current holder past the lease duration and,
	// every other round or so, the other contenders of its kind too, so
	// that the Lease passes between the kinds, both ways.
	byID := map[string]*exec.Cmd{}
	for i, p := range procs {
		byID[p.Env[len(p.Env)-1][len(envMixedID)+1:]] = procs[i]
	}
	// The rounds go on for 30 s, and past that (up to 90 s: a loaded
	// machine pauses less often and hands over more slowly) until both
	// kinds have held the Lease and a fence holder's late write has
	// reached the guard: what the checks below need to mean anything.
	lateWrite := func() bool {
		mu.Lock()
		defer mu.Unlock()
		var highest int64
		for _, wr := range writes {
			if wr.token < highest {
				return true
			}
			if wr.accepted {
				highest = max(highest, wr.token)
			}
		}
		return false
	}
	seen := map[string]bool{}
	pauses, fenceToFence, fenceToElector := 0, 0, 0
	for start := time.Now(); ; {
		if d := time.Since(start); d > 90*time.Second || d > 30*time.Second && seen["fence"] && seen["elector"] && lateWrite() {
			break
		}
		time.Sleep(time.Duration(500+rand.IntN(1000)) * time.Millisecond)
		l, err := cs.CoordinationV1().Leases(namespace).Get(ctx, mixedLease, metav1.GetOptions{})
		if err != nil {
			continue
		}
		frozen := []*exec.Cmd{}
		// An elector's identity is its id; a fence holder's owner id is
		// its id (the WithOwner prefix), a dash, and a random suffix.
		if p := byID[contender(value(l.Spec.HolderIdentity))]; p != nil {
			frozen = append(frozen, p)
		}
		holder := value(l.Spec.HolderIdentity)
		pause := time.Duration(3500+rand.IntN(1500)) * time.Millisecond // past the lease durations
		kind := strings.SplitN(holder, "-", 2)[0]
		if holder != "" {
			seen[kind] = true
		}
		// A fence holder's rounds alternate: one hands the Lease to
		// another fence contender, the next to an elector.
		switch {
		case kind == "fence" && fenceToFence <= fenceToElector:
			// Freeze the electors too, so that another fence contender
			// takes over and writes while this holder sleeps: its first
			// write when it wakes is late, and the guard must refuse it.
			for id, p := range byID {
				if strings.HasPrefix(id, "elector-") {
					frozen = append(frozen, p)
				}
			}
			pause += 1500 * time.Millisecond
			fenceToFence++
		case kind == "fence":
			for id, p := range byID {
				if strings.HasPrefix(id, "fence-") && id != contender(holder) {
					frozen = append(frozen, p)
				}
			}
			fenceToElector++
		case rand.IntN(2) == 0:
			for id, p := range byID {
				if strings.HasPrefix(id, kind+"-") && id != contender(holder) {
					frozen = append(frozen, p)
				}
			}
		}
		for _, p := range frozen {
			_ = p.Process.Signal(syscall.SIGSTOP)
		}
		time.Sleep(pause)
		for _, p := range frozen {
			_ = p.Process.Signal(syscall.SIGCONT)
		}
		pauses++
	}
	for _, p := range procs {
		_ = p.Process.Kill()
	}
	time.Sleep(time.Second)
	stopWatch()
	<-watched

	// The Lease's history.
	takeovers, releases, kinds := 0, 0, map[string]int{}
	var lastToken int64
	for i := 1; i < len(history); i++ {
		prev, cur := history[i-1], history[i]
		ph, ch := value(prev.Spec.HolderIdentity), value(cur.Spec.HolderIdentity)
		if ch == "" || ch == ph {
			if ch == "" && ph != "" {
				releases++
			}
			continue
		}
		kinds[strings.SplitN(ch, "-", 2)[0]]++
		if strings.HasPrefix(ch, "fence") {
			tok := fenceToken(cur)
			if tok <= lastToken {
				t.Errorf("fence holder %s got token %d after %d", ch, tok, lastToken)
			}
			lastToken = tok
		}
		if ph == "" {
			continue // released: free at once
		}
		takeovers++
		// How long the previous holder counted itself valid after its
		// last renewal: a fence holder its TTL (renewTime is taken before
		// the renewal is sent), an elector its lease duration.
		gap := cur.Spec.AcquireTime.Sub(prev.Spec.RenewTime.Time)
		valid := time.Duration(value(prev.Spec.LeaseDurationSeconds)) * time.Second
		if strings.HasPrefix(ph, "fence") {
			valid = ttl
		}
		switch {
		case strings.HasPrefix(ph, "elector") && strings.HasPrefix(ch, "elector"):
			// client-go among its own: not ours to check (its electors
			// see renewTime in whole seconds; see durationSeconds).
			if gap < valid {
				t.Logf("(client-go) %s took the Lease from %s %v after its last renewal", ch, ph, gap)
			}
		case gap < valid:
			t.Errorf("%s took the Lease from %s %v after its last renewal, while that holder was still valid for %v\n  before: rv %s %s\n  after:  rv %s %s",
				ch, ph, gap, valid, prev.ResourceVersion, prev.Spec.String(), cur.ResourceVersion, cur.Spec.String())
		}
	}
	mu.Lock()
	defer mu.Unlock()
	var highest int64
	late, refused := 0, 0
	for _, wr := range writes {
		if wr.token < highest {
			late++
			if wr.accepted {
				t.Errorf("write of %s with token %d accepted after token %d was written", wr.owner, wr.token, highest)
			}
		}
		if !wr.accepted {
			refused++
		}
		if wr.accepted {
			highest = max(highest, wr.token)
		}
	}
	t.Logf("%d pauses (%d fence to fence); Lease history: %d versions, holders taken by kind %v, %d taken over from a silent holder, %d releases; %d writes, %d late, %d refused",
		pauses, fenceToFence, len(history), kinds, takeovers, releases, len(writes), late, refused)
	if fenceToFence > 0 && late == 0 {
		t.Errorf("%d rounds froze a fence holder while another fence contender could take over, yet no late write reached the guard: the check was not exercised", fenceToFence)
	}
	if kinds["fence"] == 0 || kinds["elector"] == 0 {
		t.Errorf("holders by kind %v: both kinds must have held the Lease for the test to mean anything", kinds)
	}
}

// fenceToken is a Lease's token as fencek8s computes it.
func fenceToken(l *coordinationv1.Lease) int64 {
	base, _ := strconv.ParseInt(l.Annotations["fencing.github.io/token-base"], 10, 64)
	return base + int64(value(l.Spec.LeaseTransitions))
}

func value[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

func readAll(r *http.Request) string {
	sc := bufio.NewScanner(r.Body)
	var b strings.Builder
	for sc.Scan() {
		b.WriteString(sc.Text())
	}
	return b.String()
}

// prefixWriter logs a contender's stderr through the test.
type prefixWriter struct{ t *testing.T }

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.t.Logf("contender: %s", strings.TrimSpace(string(b)))
	return len(b), nil
}

// contender returns the id of the contender process whose holder identity
// is holder: "fence-0" for "fence-0-3f2a…", "elector-1" for "elector-1".
func contender(holder string) string {
	parts := strings.SplitN(holder, "-", 3)
	if len(parts) < 2 {
		return holder
	}
	return parts[0] + "-" + parts[1]
}
