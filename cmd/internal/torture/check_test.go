package torture

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// history builds events with times in milliseconds.
type history struct {
	events []Event
	ids    int64
}

func (h *history) op(w int, op, key string, call, ret int64, tok int64, val, res string) {
	h.ids++
	h.events = append(h.events,
		Event{W: w, Op: op, Ph: Call, ID: h.ids, T: call * 1e6, Key: key, Token: tok, Val: val},
		Event{W: w, Op: op, Ph: Ret, ID: h.ids, T: ret * 1e6, Key: key, Token: tok, Val: val, Res: res, Valid: int64(time.Second)})
}

// acquire: the call carries no token; the return does.
func (h *history) acquire(w int, key string, call, ret, tok int64) {
	h.ids++
	h.events = append(h.events,
		Event{W: w, Op: OpAcquire, Ph: Call, ID: h.ids, T: call * 1e6, Key: key},
		Event{W: w, Op: OpAcquire, Ph: Ret, ID: h.ids, T: ret * 1e6, Key: key, Token: tok, Res: ResOK, Valid: int64(time.Second)})
}

func (h *history) write(w int, key string, call, ret, tok int64, val, res string) {
	h.op(w, OpWrite, key, call, ret, tok, val, res)
}

func (h *history) release(w int, key string, at, tok int64) {
	h.op(w, OpRelease, key, at, at+1, tok, "", ResOK)
}

func check(h *history, applied []Applied) *Result {
	r := &Result{}
	analyze(r, h.events, applied, 1e6*1e6, 10*time.Second)
	return r
}

func TestAnalyzeClean(t *testing.T) {
	var h history
	h.acquire(0, "k", 0, 1, 1)
	h.write(0, "k", 2, 3, 1, "a", ResOK)
	h.op(0, OpRead, "k", 4, 5, 1, "a", ResOK)
	h.release(0, "k", 6, 1)
	h.acquire(1, "k", 3, 8, 2)
	h.write(1, "k", 9, 10, 2, "b", ResOK)
	h.release(1, "k", 11, 2)
	// The same tokens on another key are another lock.
	h.acquire(2, "j", 0, 1, 1)
	h.write(2, "j", 7, 8, 1, "c", ResOK)
	h.release(2, "j", 20, 1)
	r := check(&h, nil)
	if !r.OK() || r.Overlaps != 0 || r.Acquisitions != 3 || r.Writes != 3 {
		t.Fatalf("clean history: ok %v, overlaps %d, acquisitions %d, writes %d, violations %q", r.OK(), r.Overlaps, r.Acquisitions, r.Writes, r.Violations)
	}
}

// pause is docs/design.md's scenario: A holds 33, pauses, B takes 34 and writes,
// A wakes and writes with 33.
func pause(res string) *history {
	var h history
	h.acquire(0, "k", 0, 1, 33)
	h.acquire(1, "k", 1, 11, 34)
	h.write(1, "k", 13, 14, 34, "b", ResOK)
	h.write(0, "k", 16, 17, 33, "a", res)
	h.release(0, "k", 18, 33)
	h.release(1, "k", 20, 34)
	return &h
}

func TestAnalyzePauseGuarded(t *testing.T) {
	h := pause(ResStale)
	r := check(h, []Applied{{Key: "k", Token: 34, Accepted: true}, {Key: "k", Token: 33, Highest: 34}})
	if !r.OK() || r.Overlaps != 1 || r.StaleRefused != 1 || r.StaleAccepted != 0 {
		t.Fatalf("guarded pause: ok %v, overlaps %d, refused %d, accepted %d, violations %q", r.OK(), r.Overlaps, r.StaleRefused, r.StaleAccepted, r.Violations)
	}
}

func TestAnalyzePauseUnguarded(t *testing.T) {
	h := pause(ResOK)
	r := check(h, []Applied{{Key: "k", Token: 34, Accepted: true}, {Key: "k", Token: 33, Accepted: true, Stale: true, Highest: 34}})
	if r.OK() || r.Linearizable != porcupine.Illegal || r.StaleAccepted != 1 {
		t.Fatalf("unguarded pause: ok %v, linearizable %s, accepted %d", r.OK(), r.Linearizable, r.StaleAccepted)
	}
	all := strings.Join(r.Violations, "\n")
	for _, want := range []string{"register accepted a stale write", "worker 0's write with token 33", "not linearizable"} {
		if !strings.Contains(all, want) {
			t.Errorf("violations lack %q:\n%s", want, all)
		}
	}
}

// TestOverlapBound: an overlap is expected under pause and clock-jump
// only. The same history, two workers believing they hold "k" at once,
// fails a plan of every other fault, and passes those.
func TestOverlapBound(t *testing.T) {
	for _, f := range Faults {
		r := &Result{Fault: f}
		analyze(r, pause(ResStale).events, []Applied{{Key: "k", Token: 34, Accepted: true}, {Key: "k", Token: 33, Highest: 34}}, 1e6*1e6, 10*time.Second)
		if r.Overlaps != 1 {
			t.Fatalf("%s: %d overlaps, want 1", f, r.Overlaps)
		}
		flagged := strings.Contains(strings.Join(r.Violations, "\n"), "1 overlapping leases under fault "+string(f))
		if want := f != FaultPause && f != FaultClockJump; flagged != want || r.OK() == want {
			t.Errorf("fault %s with an overlap: flagged %v, OK %v; want flagged %v (violations %q)", f, flagged, r.OK(), want, r.Violations)
		}
		// The violation names the two leases, for a reader of a failed plan.
		if named := strings.Contains(strings.Join(r.Violations, "\n"), "worker 1's lock (token 34) held from"); named != flagged {
			t.Errorf("fault %s: the overlap's leases named %v, want %v (violations %q)", f, named, flagged, r.Violations)
		}
	}
	// The overlap of pause() lasts 7 ms (B's grant at 11 to A's release
	// call at 18): within a slack of TTL/10 = 7 ms it is the lag of
	// recording a loss, not a violation; past it, it is.
	for ttl, want := range map[time.Duration]bool{70 * time.Millisecond: false, 60 * time.Millisecond: true} {
		r := &Result{Fault: FaultDelay, TTL: ttl}
		analyze(r, pause(ResStale).events, []Applied{{Key: "k", Token: 34, Accepted: true}, {Key: "k", Token: 33, Highest: 34}}, 1e6*1e6, 10*time.Second)
		if flagged := !r.OK(); flagged != want {
			t.Errorf("an overlap of 7ms with TTL %v (slack %v): flagged %v, want %v (%q)", ttl, overlapSlack(ttl), flagged, want, r.Violations)
		}
	}
}

func TestAnalyzeUnknownWrite(t *testing.T) {
	// A's write timed out: it may have landed before B's, after it
	// (refused) or never. Each is fine.
	var h history
	h.acquire(0, "k", 0, 1, 1)
	h.write(0, "k", 2, 5, 1, "a", ResUnknown)
	h.acquire(1, "k", 3, 6, 2)
	h.write(1, "k", 7, 8, 2, "b", ResOK)
	h.op(1, OpRead, "k", 9, 10, 2, "b", ResOK)
	h.events = append(h.events, Event{W: 2, Op: OpWrite, Ph: Call, ID: 99, T: 11e6, Key: "k", Token: 1, Val: "c"}) // killed mid-write
	r := check(&h, nil)
	if !r.OK() || r.Unknown != 2 {
		t.Fatalf("unknown writes: ok %v, unknown %d, violations %q", r.OK(), r.Unknown, r.Violations)
	}
}

func TestAnalyzeBadReads(t *testing.T) {
	var h history
	h.acquire(0, "k", 0, 1, 1)
	h.write(0, "k", 2, 3, 1, "a", ResOK)
	h.op(0, OpRead, "k", 4, 5, 0, "", ResOK) // lost the write
	r := check(&h, nil)
	if r.Linearizable != porcupine.Illegal {
		t.Fatalf("a read missing an acknowledged write: linearizable %s", r.Linearizable)
	}
}

func TestAnalyzeTokens(t *testing.T) {
	for name, tc := range map[string]struct {
		build func(h *history)
		want  string
	}{
		"went back": {func(h *history) {
			h.acquire(0, "k", 0, 1, 5)
			h.release(0, "k", 2, 5)
			h.acquire(1, "k", 3, 4, 4)
		}, "tokens for \"k\" went back"},
		"granted twice": {func(h *history) {
			h.acquire(0, "k", 0, 1, 5)
			h.release(0, "k", 2, 5)
			h.acquire(1, "k", 3, 4, 5)
		}, "granted twice"},
		"late reply": {func(h *history) {
			h.acquire(0, "k", 0, 9, 5) // its reply came last
			h.acquire(1, "k", 1, 5, 6)
		}, "late reply reported as held"},
		"no validity": {func(h *history) {
			h.events = append(h.events,
				Event{W: 0, Op: OpAcquire, Ph: Call, ID: 1, T: 0, Key: "k"},
				Event{W: 0, Op: OpAcquire, Ph: Ret, ID: 1, T: 1, Key: "k", Token: 1, Res: ResOK})
		}, "no validity left"},
	} {
		t.Run(name, func(t *testing.T) {
			var h history
			tc.build(&h)
			r := check(&h, nil)
			if r.OK() || !strings.Contains(strings.Join(r.Violations, "\n"), tc.want) {
				t.Errorf("violations %q; want one with %q", r.Violations, tc.want)
			}
			// Only a token that went back is a regression ("granted
			// twice" went back too: 5 after 5).
			if want := name == "went back" || name == "granted twice"; (r.TokenRegressions == 1) != want {
				t.Errorf("TokenRegressions = %d; want %v", r.TokenRegressions, want)
			}
		})
	}
}

func TestAnalyzeOverlapEnds(t *testing.T) {
	// A belief ends at the release call, at a detected loss, at a kill.
	var h history
	h.acquire(0, "k", 0, 1, 1)
	h.events = append(h.events, Event{W: 0, Op: OpLost, T: 5e6, Key: "k", Token: 1})
	h.acquire(1, "k", 2, 6, 2)
	h.events = append(h.events, Event{W: 1, Op: OpKill, T: 7e6})
	h.acquire(2, "k", 3, 8, 3)
	h.release(2, "k", 9, 3)
	h.acquire(0, "k", 6, 10, 4)
	r := check(&h, nil)
	if r.Overlaps != 0 || r.Losses != 1 || !r.OK() {
		t.Fatalf("overlaps %d, losses %d, violations %q", r.Overlaps, r.Losses, r.Violations)
	}
}

// TestCrashOverlap: under a fault that loses the store's state, an
// overlap is allowed only when the older lease was granted before the loss,
// the newer after the episode began, and the older holder stopped
// believing within a TTL (plus the slack) of the loss; any other overlap
// fails the plan, as under every fault but pause.
func TestCrashOverlap(t *testing.T) {
	// pause(): A holds 33 from 1 ms, B is granted 34 at 11 ms, A's release
	// call at 18 ms ends A's belief.
	for _, c := range []struct {
		name             string
		start, loss, end int64 // ms; the loss event is the start's or the end's
		ttl              time.Duration
		want             bool // flagged
	}{
		{"loss at 5ms, TTL 20ms: A stopped within it", 5, 5, 9, 20 * time.Millisecond, false},
		{"loss at the wipe's end", 4, 9, 9, 20 * time.Millisecond, false},
		{"loss at 5ms, TTL 10ms: A believed 2ms too long", 5, 5, 9, 10 * time.Millisecond, true},
		{"episode after B's grant", 12, 12, 14, 20 * time.Millisecond, true},
		{"A granted after the loss", 0, 0, 1, 50 * time.Millisecond, true},
	} {
		for _, f := range []Fault{FaultRestartEmpty, FaultWipe} {
			h := pause(ResStale)
			events := append([]Event(nil), h.events...)
			events = append(events, Event{W: -1, Op: OpFault, T: c.start * 1e6, Loss: c.loss == c.start})
			events = append(events, Event{W: -1, Op: OpFault, T: c.end * 1e6, End: true, Loss: c.loss != c.start})
			r := &Result{Fault: f, TTL: c.ttl}
			analyze(r, events, []Applied{{Key: "k", Token: 34, Accepted: true}, {Key: "k", Token: 33, Highest: 34}}, 1e6*1e6, 10*time.Second)
			if r.Overlaps != 1 {
				t.Fatalf("%s: %d overlaps, want 1", c.name, r.Overlaps)
			}
			if flagged := !r.OK(); flagged != c.want {
				t.Errorf("%s, %s: flagged %v, want %v (%q)", f, c.name, flagged, c.want, r.Violations)
			}
		}
	}
}

// TestCrashOverlapNewerForgotten: in a partition the forgotten lease may
// be the newer one, granted on the cut-off side after the majority's side
// granted the key: A is granted at 1 ms on the majority's side (after the
// cut at 0) and holds to 40 ms; B is granted at 11 ms on the cut-off
// side, whose writes are lost at 12 ms, and believes until 20 ms. Within
// a TTL of the loss that is explained; past it, it fails the plan.
func TestCrashOverlapNewerForgotten(t *testing.T) {
	for ttl, want := range map[time.Duration]bool{10 * time.Millisecond: false, 5 * time.Millisecond: true} {
		var h history
		h.acquire(0, "k", 0, 1, 33)
		h.acquire(1, "k", 1, 11, 34)
		h.release(1, "k", 20, 34)
		h.release(0, "k", 40, 33)
		events := withEpisode(h.events, 12, true)
		r := &Result{Fault: FaultPartition, TTL: ttl}
		analyze(r, events, nil, 1e6*1e6, 10*time.Second)
		if r.Overlaps != 1 {
			t.Fatalf("TTL %v: %d overlaps, want 1", ttl, r.Overlaps)
		}
		if flagged := slices.ContainsFunc(r.Violations, func(v string) bool { return strings.Contains(v, "believed") }); flagged != want {
			t.Errorf("TTL %v: flagged %v, want %v (%q)", ttl, flagged, want, r.Violations)
		}
	}
}

// TestNextGrant: the time from each restart to the next lease granted,
// the episodes with no grant after it counted ("none" if every one);
// only restart and partition plans measure it.
func TestNextGrant(t *testing.T) {
	ms := int64(time.Millisecond)
	events := []Event{
		{W: 0, Op: OpAcquire, Ph: Ret, Res: ResOK, T: 5 * ms},
		{W: -1, Op: OpFault, Fault: "kill redis-server", T: 10 * ms},
		{W: 1, Op: OpAcquire, Ph: Ret, Res: ResFail, T: 20 * ms},
		{W: -1, Op: OpFault, Fault: "redis-server restarted", End: true, T: 30 * ms},
		{W: 1, Op: OpAcquire, Ph: Ret, Res: ResOK, T: 250 * ms},
		{W: -1, Op: OpFault, Fault: "kill redis-server", T: 300 * ms},
	}
	got := nextGrants(events)
	want := []time.Duration{240 * time.Millisecond, -1}
	if !slices.Equal(got, want) {
		t.Errorf("nextGrants = %v; want %v", got, want)
	}
	if s := nextGrant(got); s != "240ms (1 none)" {
		t.Errorf("nextGrant(%v) = %q; want 240ms (1 none)", got, s)
	}
	if s := nextGrant(got[1:]); s != "none" {
		t.Errorf("nextGrant(%v) = %q; want none", got[1:], s)
	}
	if s := nextGrant(got[:1]); s != "240ms" {
		t.Errorf("nextGrant(%v) = %q; want 240ms", got[:1], s)
	}
	for _, f := range Faults {
		r := &Result{Fault: f}
		analyze(r, slices.Clone(events), nil, 400*ms, time.Second)
		if measured := r.NextGrant != nil; measured != (f == FaultRestart || f == FaultPartition) {
			t.Errorf("fault %s: NextGrant %v; want it measured only under restart and partition", f, r.NextGrant)
		}
	}
}

// acquireKind is acquire for a semaphore slot or a side of a reader-writer
// lock (Event.Kind).
func (h *history) acquireKind(w int, key, kind string, call, ret, tok int64) {
	h.acquire(w, key, call, ret, tok)
	h.events[len(h.events)-2].Kind = kind
	h.events[len(h.events)-1].Kind = kind
}

// crowd is three workers on a semaphore of limit 2: A and B hold from 1
// and 2 ms; C is granted a third slot at 10 ms, and A's release call at
// 18 ms ends the 8 ms in which three believed they held one.
func crowd() *history {
	var h history
	h.acquireKind(0, "k", "semaphore", 0, 1, 1)
	h.acquireKind(1, "k", "semaphore", 1, 2, 2)
	h.acquireKind(2, "k", "semaphore", 3, 10, 3)
	h.write(2, "k", 11, 12, 3, "c", ResOK)
	h.release(0, "k", 18, 1)
	h.release(1, "k", 20, 2)
	h.release(2, "k", 22, 3)
	return &h
}

// TestSemaphoreOverlapBound: more workers than the limit believing they
// hold a slot at once is an overlap, bounded per fault as two holders of
// a lock are; as many as the limit is not.
func TestSemaphoreOverlapBound(t *testing.T) {
	applied := []Applied{{Key: "k", Token: 3, Accepted: true}}
	for _, f := range Faults {
		r := &Result{Fault: f, Kind: KindSemaphore, Limit: 2}
		analyze(r, crowd().events, applied, 1e6*1e6, 10*time.Second)
		if r.Overlaps != 1 {
			t.Fatalf("%s: %d overlaps, want 1", f, r.Overlaps)
		}
		flagged := strings.Contains(strings.Join(r.Violations, "\n"), "1 overlapping leases under fault "+string(f))
		if want := f != FaultPause && f != FaultClockJump; flagged != want || r.OK() == want {
			t.Errorf("fault %s with three holders of two slots: flagged %v, OK %v; want flagged %v (violations %q)", f, flagged, r.OK(), want, r.Violations)
		}
		// The same history is within a limit of 3; and a lock-sized
		// limit of 1 sees one longer episode, from B's grant.
		for limit, want := range map[int]int{3: 0, 1: 1} {
			r := &Result{Fault: f, Kind: KindSemaphore, Limit: limit}
			analyze(r, crowd().events, applied, 1e6*1e6, 10*time.Second)
			if r.Overlaps != want {
				t.Errorf("%s, limit %d: %d overlaps, want %d (violations %q)", f, limit, r.Overlaps, want, r.Violations)
			}
		}
	}
	// Past the slack (TTL/10), not within it.
	for ttl, want := range map[time.Duration]bool{80 * time.Millisecond: false, 70 * time.Millisecond: true} {
		r := &Result{Fault: FaultKill, Kind: KindSemaphore, Limit: 2, TTL: ttl}
		analyze(r, crowd().events, applied, 1e6*1e6, 10*time.Second)
		if flagged := !r.OK(); flagged != want {
			t.Errorf("three holders for 8ms with TTL %v (slack %v): flagged %v, want %v (%q)", ttl, overlapSlack(ttl), flagged, want, r.Violations)
		}
	}
	// A loss of the store's state at 5 ms explains C's slot while A
	// believes within a TTL of it, as crashOverlap explains two holders of
	// a lock.
	for ttl, want := range map[time.Duration]bool{20 * time.Millisecond: false, 10 * time.Millisecond: true} {
		events := append(crowd().events, Event{W: -1, Op: OpFault, T: 5e6, Loss: true}, Event{W: -1, Op: OpFault, T: 9e6, End: true})
		r := &Result{Fault: FaultWipe, Kind: KindSemaphore, Limit: 2, TTL: ttl}
		analyze(r, events, applied, 1e6*1e6, 10*time.Second)
		if flagged := !r.OK(); flagged != want || r.Overlaps != 1 {
			t.Errorf("wipe at 5ms, TTL %v: %d overlaps, flagged %v, want flagged %v (%q)", ttl, r.Overlaps, flagged, want, r.Violations)
		}
	}
}

// TestRWOverlapBound: readers beside readers are no overlap; a writer
// beside a reader or another writer is, bounded per fault.
func TestRWOverlapBound(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"read", "read", 0},
		{"read", "write", 1},
		{"write", "read", 1},
		{"write", "write", 1},
	} {
		for _, f := range Faults {
			var h history
			h.acquireKind(0, "k", c.a, 0, 1, 1)
			h.acquireKind(1, "k", c.b, 1, 5, 2)
			h.op(1, OpRead, "k", 6, 7, 0, "", ResOK)
			h.release(0, "k", 20, 1)
			h.release(1, "k", 22, 2)
			r := &Result{Fault: f, Kind: KindRW}
			analyze(r, h.events, nil, 1e6*1e6, 10*time.Second)
			if r.Overlaps != c.want {
				t.Fatalf("%s beside %s under %s: %d overlaps, want %d", c.b, c.a, f, r.Overlaps, c.want)
			}
			flagged := strings.Contains(strings.Join(r.Violations, "\n"), "a writer believed it held the key")
			if want := c.want > 0 && f != FaultPause && f != FaultClockJump; flagged != want || r.OK() == want {
				t.Errorf("%s beside %s under %s: flagged %v, OK %v; want flagged %v (%q)", c.b, c.a, f, flagged, r.OK(), want, r.Violations)
			}
		}
	}
}

// TestAnalyzeTokensKinds: semaphore slots and both sides of a
// reader-writer lock keep DESIGN.md's token promises (in real-time order,
// never twice); a late reply is one only where the kinds exclude each
// other.
func TestAnalyzeTokensKinds(t *testing.T) {
	for name, tc := range map[string]struct {
		build func(h *history)
		want  string // "" for clean
	}{
		"semaphore slot reported after a higher one": {func(h *history) {
			h.acquireKind(0, "k", "semaphore", 0, 9, 5)
			h.acquireKind(1, "k", "semaphore", 1, 5, 6)
		}, ""},
		"reader reported after a higher reader": {func(h *history) {
			h.acquireKind(0, "k", "read", 0, 9, 5)
			h.acquireKind(1, "k", "read", 1, 5, 6)
		}, ""},
		"reader reported after a higher writer": {func(h *history) {
			h.acquireKind(0, "k", "read", 0, 9, 5)
			h.acquireKind(1, "k", "write", 1, 5, 6)
		}, "late reply reported as held"},
		"writer reported after a higher reader": {func(h *history) {
			h.acquireKind(0, "k", "write", 0, 9, 5)
			h.acquireKind(1, "k", "read", 1, 5, 6)
		}, "late reply reported as held"},
		"semaphore tokens went back": {func(h *history) {
			h.acquireKind(0, "k", "semaphore", 0, 1, 5)
			h.acquireKind(1, "k", "semaphore", 2, 3, 4)
		}, "tokens for \"k\" went back"},
		"semaphore token granted twice": {func(h *history) {
			h.acquireKind(0, "k", "semaphore", 0, 2, 5)
			h.acquireKind(1, "k", "semaphore", 1, 3, 5)
		}, "granted twice"},
		"reader's token below an earlier writer's": {func(h *history) {
			h.acquireKind(0, "k", "write", 0, 1, 5)
			h.release(0, "k", 2, 5)
			h.acquireKind(1, "k", "read", 3, 4, 4)
		}, "tokens for \"k\" went back"},
	} {
		t.Run(name, func(t *testing.T) {
			var h history
			tc.build(&h)
			r := check(&h, nil)
			all := strings.Join(r.Violations, "\n")
			if tc.want == "" && !r.OK() {
				t.Errorf("violations %q; want none", r.Violations)
			}
			if tc.want != "" && (r.OK() || !strings.Contains(all, tc.want)) {
				t.Errorf("violations %q; want one with %q", r.Violations, tc.want)
			}
		})
	}
}

// TestLossDetection: each loss a holder detects is timed from the start of
// the latest fault episode before it; one before any episode is not.
func TestLossDetection(t *testing.T) {
	ms := int64(time.Millisecond)
	events := []Event{
		{W: 0, Op: OpLost, Key: "k", Token: 1, T: 5 * ms},
		{W: -1, Op: OpFault, Fault: "cut", T: 10 * ms},
		{W: 1, Op: OpLost, Key: "k", Token: 2, T: 250 * ms},
		{W: -1, Op: OpFault, Fault: "heal", End: true, T: 300 * ms},
		{W: -1, Op: OpFault, Fault: "cut", T: 400 * ms},
		{W: 2, Op: OpLost, Key: "k", Token: 3, T: 500 * ms},
		{W: 2, Op: OpLost, Key: "k", Token: 3, T: 900 * ms}, // the same lease again
	}
	r := &Result{Fault: FaultPartition}
	analyze(r, events, nil, time.Second.Nanoseconds(), time.Second)
	want := []time.Duration{100 * time.Millisecond, 240 * time.Millisecond}
	if !slices.Equal(r.LossDetect, want) {
		t.Errorf("LossDetect = %v; want %v", r.LossDetect, want)
	}
	if s := lossDetect(r.LossDetect); s != "100ms/240ms" {
		t.Errorf("lossDetect = %q; want 100ms/240ms", s)
	}
	if s := lossDetect(nil); s != "-" {
		t.Errorf("lossDetect(nil) = %q; want -", s)
	}
	ds := make([]time.Duration, 200)
	for i := range ds {
		ds[i] = time.Duration(i+1) * time.Millisecond
	}
	if p50, p99 := percentile(ds, 50), percentile(ds, 99); p50 != 100*time.Millisecond || p99 != 198*time.Millisecond {
		t.Errorf("percentiles of 1..200 ms: p50 %v, p99 %v; want 100ms, 198ms", p50, p99)
	}
}

// TestCheckGrants: an episode must see a grant within the bound, whatever
// follows it; one too close to the plan's end is not held to it.
func TestCheckGrants(t *testing.T) {
	s := int64(time.Second)
	events := []Event{
		{W: -1, Op: OpFault, Fault: "kill leader", T: 0},
		{W: -1, Op: OpFault, Fault: "leader back", End: true, T: 1 * s},
		{W: -1, Op: OpFault, Fault: "kill follower", T: 2 * s},
		{W: 1, Op: OpAcquire, Ph: Ret, Res: ResFail, T: 2500 * int64(time.Millisecond)},
		{W: 1, Op: OpAcquire, Ph: Ret, Res: ResOK, T: 3 * s},
		{W: -1, Op: OpFault, Fault: "kill leader", T: 9 * s}, // near the end
		{W: 0, Op: OpExit, T: 10 * s},
	}
	if v := checkGrants(events, 5*time.Second); len(v) != 0 {
		t.Errorf("grants within 5 s: %q; want none", v)
	}
	v := checkGrants(events, 2*time.Second)
	if len(v) != 1 || !strings.Contains(v[0], `"kill leader"`) {
		t.Errorf("grants within 2 s: %q; want the first kill named (3 s to its grant), not the last (too close to the end)", v)
	}
	if v := checkGrants(events, 0); v != nil {
		t.Errorf("no bound: %q", v)
	}
	// Only restart and partition plans are held to it.
	for _, f := range Faults {
		r := &Result{Fault: f, grantWithin: 2 * time.Second}
		analyze(r, slices.Clone(events), nil, 10*s, time.Second)
		held := slices.ContainsFunc(r.Violations, func(v string) bool { return strings.Contains(v, "no lease granted") })
		if want := f == FaultRestart || f == FaultPartition; held != want {
			t.Errorf("fault %s: held to the bound %v; want %v", f, held, want)
		}
	}
}

// TestPlanProved: a plan goes on past its duration (faults) until an
// episode has ended, two leases were granted and one after the episode.
func TestPlanProved(t *testing.T) {
	p := &plan{cfg: Config{Fault: FaultWipe}}
	grant := func() {
		p.mu.Lock()
		p.grants++
		p.lastGrant = Now()
		p.mu.Unlock()
	}
	if err := p.proved(); err != errNoEpisode {
		t.Fatalf("nothing yet: %v, want %v", err, errNoEpisode)
	}
	grant()
	grant()
	if err := p.proved(); err != errNoEpisode {
		t.Fatalf("grants, no episode: %v, want %v", err, errNoEpisode)
	}
	p.episodeEnded()
	if err := p.proved(); err != errNoGrant {
		t.Fatalf("no grant after the episode: %v, want %v", err, errNoGrant)
	}
	grant()
	if err := p.proved(); err != nil {
		t.Fatalf("a grant after the episode: %v, want nil", err)
	}
	none := &plan{cfg: Config{Fault: FaultNone}}
	if err := none.proved(); err != errNoGrant {
		t.Fatalf("no fault, no grant: %v, want %v", err, errNoGrant)
	}
}

// TestLateReplyOfALoss: in a partition, the cut-off master grants B token
// 33 (reply at 12 ms) after the other side granted A token 34 (at 5 ms):
// a late reply, unless a loss of the cut-off side's state (at 13 ms)
// explains it and B stopped believing within a TTL of it.
func TestLateReplyOfALoss(t *testing.T) {
	for _, c := range []struct {
		name string
		loss bool
		ttl  time.Duration
		want bool // flagged
	}{
		{"no loss", false, 20 * time.Millisecond, true},
		{"a loss, B stopped within a TTL of it", true, 20 * time.Millisecond, false},
		{"a loss, B believed too long", true, 5 * time.Millisecond, true},
	} {
		var h history
		h.acquire(0, "k", 1, 5, 34)
		h.acquire(1, "k", 2, 12, 33)
		h.release(1, "k", 20, 33)
		h.release(0, "k", 40, 34)
		events := withEpisode(h.events, 13, c.loss)
		r := &Result{Fault: FaultPartition, TTL: c.ttl}
		analyze(r, events, nil, 1e6*1e6, 10*time.Second)
		if flagged := slices.ContainsFunc(r.Violations, func(v string) bool { return strings.Contains(v, "late reply") }); flagged != c.want {
			t.Errorf("%s: late reply flagged %v, want %v (%q)", c.name, flagged, c.want, r.Violations)
		}
	}
}

// withEpisode adds to events a fault episode from 0 to at+1 ms, whose
// store lost its state at at ms if lost.
func withEpisode(events []Event, at int64, lost bool) []Event {
	return append(events,
		Event{W: -1, Op: OpFault, T: 0},
		Event{W: -1, Op: OpFault, T: at * 1e6, Loss: lost},
		Event{W: -1, Op: OpFault, T: (at + 1) * 1e6, End: true})
}
