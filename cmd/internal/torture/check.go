package torture

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/fencing/fence"
)

// The fenced-register model: the specification the register must meet,
// with or without a guard in front of it. A write with token t is accepted
// iff t >= the highest token accepted before; a read returns the token and
// value of the last accepted write. A write whose outcome is unknown may
// take effect at any point after its call, or never (porcupine places it
// after everything else).

type regInput struct {
	Key   string
	Write bool
	Token int64
	Val   string
}

type regOutput struct {
	Unknown  bool
	Accepted bool
	Token    int64
	Val      string
}

type regState struct {
	Max int64
	Val string
}

// FencedRegister is the porcupine model of one fenced register per key.
var FencedRegister = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(regInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		slices.Sort(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return regState{} },
	Step: func(s0, i0, o0 any) (bool, any) {
		s, in, out := s0.(regState), i0.(regInput), o0.(regOutput)
		if !in.Write {
			return out.Unknown || (out.Token == s.Max && out.Val == s.Val), s
		}
		accept := in.Token >= s.Max
		if !out.Unknown && out.Accepted != accept {
			return false, s // a stale token accepted, or a fresh one refused
		}
		if accept {
			return true, regState{Max: in.Token, Val: in.Val}
		}
		return true, s
	},
	DescribeOperation: func(i0, o0 any) string {
		in, out := i0.(regInput), o0.(regOutput)
		if !in.Write {
			if out.Unknown {
				return "read -> ?"
			}
			return fmt.Sprintf("read -> tok %d %q", out.Token, out.Val)
		}
		res := "refused"
		switch {
		case out.Unknown:
			res = "unknown"
		case out.Accepted:
			res = "accepted"
		}
		return fmt.Sprintf("write tok %d %q -> %s", in.Token, in.Val, res)
	},
	DescribeState: func(s0 any) string {
		s := s0.(regState)
		return fmt.Sprintf("max tok %d, %q", s.Max, s.Val)
	},
}

// Result is what one torture plan found: a row of the summary table.
type Result struct {
	Store string
	Fault Fault
	Guard bool
	TTL   time.Duration // the leases' TTL
	// Kind is what the workers acquired ("" counts as KindLock), and
	// Limit a semaphore's number of slots.
	Kind  LeaseKind
	Limit int
	// NA, if set, says why the fault does not apply to the store; the plan
	// did not run.
	NA string

	Acquisitions  int // successful acquisitions
	Overlaps      int // pairs of leases on a key that two workers believed held at the same moment (a reader-writer lock: pairs with a writer; a semaphore: episodes of more holders than its limit)
	StaleRefused  int // writes the register refused for a stale token
	StaleAccepted int // writes the register accepted although a higher token had been accepted
	Losses        int // leases whose holder detected the loss (ErrLost)
	Writes        int // write attempts
	Unknown       int // writes with unknown outcome (timed out, worker killed)
	Faults        int // fault episodes injected
	// AcquireErrors counts acquisitions that failed with an error other
	// than the end of their wait: the store told a waiting client no, or
	// could not be reached, where availability means waiting on.
	AcquireErrors int
	// NextGrant is, for each episode of a restart or partition plan, the
	// time from the kill of the store's server (or member), or from the
	// cut, to the next lease granted to any worker; negative if none was
	// before the plan ended.
	NextGrant []time.Duration
	// TokenRegressions counts grants whose token was not above every
	// token granted on the key before the grant was asked for.
	TokenRegressions int
	// LossDetect is, for each loss a holder detected after a fault
	// episode began, the time from the start of the latest episode before
	// it to the detection, shortest first.
	LossDetect []time.Duration
	// Linearizable is porcupine's verdict on the register's history
	// against FencedRegister: Ok, Illegal or Unknown (timed out).
	Linearizable porcupine.CheckResult
	// Violations lists every failed direct check.
	Violations []string
	// HTML is the porcupine visualization written for a history that is
	// not linearizable, if any.
	HTML string
	// LogDir holds the workers' standard error.
	LogDir   string
	Duration time.Duration

	info   porcupine.LinearizationInfo
	ops    []porcupine.Operation
	leases []leaseSpan
	// grantWithin is Store.grantWithin.
	grantWithin time.Duration
}

// overlapBound is, per fault, how many overlapping leases (two workers
// believing they hold one key at once; a writer beside anyone else; more
// workers than a semaphore's limit) a plan may show. A holder's
// validity is measured from before its request was sent, minus a drift
// margin, so it ends before the store can free the key: a holder that is
// cut off (blackhole), slowed (delay), killed, or whose store is down for
// longer than a TTL (restart) stops believing before anyone else is
// granted the key. Only a holder that cannot run its own timer (pause,
// SIGSTOP), or whose store's clock jumped forward and ended its lease
// early (clock-jump), overlaps, and its writes are what fencing tokens
// are for: their bound is unlimited, and the guard is what the plan
// checks. A fault not listed here is not bounded.
var overlapBound = map[Fault]int{
	FaultNone:         0,
	FaultBlackhole:    0,
	FaultDelay:        0,
	FaultKill:         0,
	FaultRestart:      0,
	FaultRestartEmpty: 0, // beyond the overlaps crashOverlap explains
	FaultWipe:         0, // likewise
	FaultPartition:    0,
}

// waitEnded reports whether an acquisition's error is the end of its
// wait (its deadline, or the plan's end) rather than the store's answer.
func waitEnded(err string) bool {
	return strings.Contains(err, context.DeadlineExceeded.Error()) || strings.Contains(err, context.Canceled.Error())
}

// nextGrants returns, for each fault episode in events (sorted by time),
// the time from its start to the first lease granted after it; -1 where
// none was.
func nextGrants(events []Event) []time.Duration {
	var out []time.Duration
	for i, e := range events {
		if e.Op != OpFault || e.End {
			continue
		}
		d := time.Duration(-1)
		for _, g := range events[i+1:] {
			if g.Op == OpAcquire && g.Ph == Ret && g.Res == ResOK {
				d = time.Duration(g.T - e.T)
				break
			}
		}
		out = append(out, d)
	}
	return out
}

// checkGrants is the availability check of a cluster that loses a member
// (within > 0): every fault episode that began at least within before the
// plan's last event must see a lease granted within that time of its
// start, however many episodes follow. A waiter must wait through an
// election, not give up, and get the key once the store has a leader
// again.
func checkGrants(events []Event, within time.Duration) []string {
	if within <= 0 || len(events) == 0 {
		return nil
	}
	last := events[len(events)-1].T // sorted by time
	var v []string
	for i, e := range events {
		if e.Op != OpFault || e.End || e.T+int64(within) > last {
			continue
		}
		granted := false
		for _, g := range events[i+1:] {
			if g.T > e.T+int64(within) {
				break
			}
			if g.Op == OpAcquire && g.Ph == Ret && g.Res == ResOK {
				granted = true
				break
			}
		}
		if !granted {
			v = append(v, fmt.Sprintf("no lease granted within %v of the fault %q: a waiter must get the key once the store has a leader again", within, e.Fault))
		}
	}
	return v
}

// lossDetection returns, for each detected loss (at the times in lost),
// the time since the start of the latest fault episode before it (starts,
// in order), shortest first; losses before any episode are left out.
func lossDetection[K comparable](lost map[K]int64, starts []int64) []time.Duration {
	var out []time.Duration
	for _, t := range lost {
		i, _ := slices.BinarySearch(starts, t+1) // the first start after t
		if i > 0 {
			out = append(out, time.Duration(t-starts[i-1]))
		}
	}
	slices.Sort(out)
	return out
}

// percentile returns the p-th percentile (0 < p <= 100) of sorted ds, by
// the nearest rank; 0 for none.
func percentile(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[max(0, (len(ds)*p+99)/100-1)]
}

// lossEpisode is a fault episode in which the store lost its state: from
// its start to its end, with the moment the state was gone (Loss).
type lossEpisode struct{ Start, Loss, End int64 }

// lossEpisodes returns the episodes whose events mark a loss of the
// store's state.
func lossEpisodes(events []Event) []lossEpisode {
	var out []lossEpisode
	var cur *lossEpisode
	for _, e := range events { // sorted by time
		if e.Op != OpFault {
			continue
		}
		if cur == nil {
			cur = &lossEpisode{Start: e.T}
		}
		if e.Loss {
			cur.Loss = e.T
		}
		if e.End {
			cur.End = e.T
			if cur.Loss != 0 {
				out = append(out, *cur)
			}
			cur = nil
		}
	}
	if cur != nil && cur.Loss != 0 {
		cur.End = math.MaxInt64
		out = append(out, *cur)
	}
	return out
}

// crashOverlap reports whether the overlap of older with newer is the one
// a loss of the store's state makes, and no longer: one of the two was
// granted before the state was lost, the other after the episode began
// (the store no longer knew the first one's lease, and granted the key
// again), and the first one's belief ended within a TTL of the loss (its
// validity counts from a renewal sent before the loss; a renewal after it
// must fail), plus the lag of recording the loss. The forgotten lease is
// usually the older; in a partition it may be the newer, granted on the
// cut-off side after the majority's side granted the key. A driver that
// renewed a lease the store had forgotten, or a holder that went on
// believing, overlaps longer and fails the plan.
func crashOverlap(older, newer leaseSpan, episodes []lossEpisode, ttl time.Duration) bool {
	forgotten := func(lost, other leaseSpan, ep lossEpisode) bool {
		return lost.From < ep.Loss && other.From > ep.Start && lost.To <= ep.Loss+int64(ttl+overlapSlack(ttl))
	}
	for _, ep := range episodes {
		if forgotten(older, newer, ep) || forgotten(newer, older, ep) {
			return true
		}
	}
	return false
}

// describeOverlap names two overlapping leases, their spans and the loss
// episodes around them, in milliseconds from the earlier's grant: what a
// reader of a failed plan needs and a history's tail may not show.
func describeOverlap(a, b leaseSpan, episodes []lossEpisode) string {
	t0 := min(a.From, b.From)
	ms := func(t int64) string {
		if t == math.MaxInt64 {
			return "never"
		}
		return fmt.Sprintf("%.1f", float64(t-t0)/1e6)
	}
	span := func(l leaseSpan) string {
		kind := l.Kind
		if kind == "" {
			kind = "lock"
		}
		return fmt.Sprintf("worker %d's %s (token %d) held from %sms to %sms", l.W, kind, l.Token, ms(l.From), ms(l.To))
	}
	s := fmt.Sprintf("  %s; %s", span(a), span(b))
	for _, ep := range episodes {
		if ep.Start <= max(a.To, b.To) && ep.End >= t0 {
			s += fmt.Sprintf("; a loss episode began at %sms, lost the state at %sms, ended at %sms", ms(ep.Start), ms(ep.Loss), ms(ep.End))
		}
	}
	return s
}

// overlapSlack is how long an overlap may last before it counts against
// the fault's bound: a tenth of the TTL, the time a loaded machine may
// take to run the goroutine that records a loss. A holder that goes on
// believing past its validity does so for a renewal period or more.
func overlapSlack(ttl time.Duration) time.Duration { return ttl / 10 }

// OK reports whether the plan found nothing wrong.
func (r *Result) OK() bool {
	return r.NA != "" || (len(r.Violations) == 0 && r.Linearizable == porcupine.Ok)
}

// leaseSpan is a lease as its holder believed in it: from the return of its
// acquire to its release call, the detected loss, or the holder's death.
type leaseSpan struct {
	W          int
	Key        string
	Kind       string // Event.Kind: "" for a lock, "semaphore", "read", "write"
	Token      int64
	Call, From int64 // acquire call and return
	To         int64
	Valid      int64
}

// analyze checks a history. end is the time the plan ended.
func analyze(r *Result, events []Event, applied []Applied, end int64, timeout time.Duration) {
	slices.SortStableFunc(events, func(a, b Event) int { return cmp.Compare(a.T, b.T) })
	if r.Fault == FaultRestart || r.Fault == FaultPartition {
		r.NextGrant = nextGrants(events)
		r.Violations = append(r.Violations, checkGrants(events, r.grantWithin)...)
	}

	type opKey struct {
		w  int
		id int64
	}
	calls := map[opKey]Event{}
	rets := map[opKey]Event{}
	type leaseKey struct {
		w     int
		key   string
		token int64
	}
	dead := map[int]int64{} // worker -> killed or exited at
	lost := map[leaseKey]int64{}
	releasing := map[leaseKey]int64{}
	var starts []int64 // of fault episodes, in order
	for _, e := range events {
		switch {
		case e.Op == OpKill || e.Op == OpExit:
			if _, ok := dead[e.W]; !ok {
				dead[e.W] = e.T
			}
		case e.Op == OpLost:
			k := leaseKey{e.W, e.Key, e.Token}
			if _, ok := lost[k]; !ok {
				lost[k] = e.T
			}
		case e.Op == OpFault && !e.End:
			r.Faults++
			if len(starts) == 0 || starts[len(starts)-1] < e.T {
				starts = append(starts, e.T)
			}
		case e.Ph == Call:
			calls[opKey{e.W, e.ID}] = e
			if e.Op == OpRelease {
				releasing[leaseKey{e.W, e.Key, e.Token}] = e.T
			}
		case e.Ph == Ret:
			rets[opKey{e.W, e.ID}] = e
			if e.Op == OpAcquire && e.Res == ResFail && !waitEnded(e.Err) {
				r.AcquireErrors++
			}
			if e.Op == OpRelease && e.Res == ResLost {
				k := leaseKey{e.W, e.Key, e.Token}
				if _, ok := lost[k]; !ok {
					lost[k] = e.T
				}
			}
		}
	}
	r.Losses = len(lost)
	r.LossDetect = lossDetection(lost, starts)

	// Leases, and the register operations for porcupine.
	var acquires []leaseSpan
	for k, c := range calls {
		ret, done := rets[k]
		switch c.Op {
		case OpAcquire:
			if !done || ret.Res != ResOK {
				continue
			}
			s := leaseSpan{W: c.W, Key: c.Key, Kind: c.Kind, Token: ret.Token, Call: c.T, From: ret.T, To: end, Valid: ret.Valid}
			lk := leaseKey{c.W, c.Key, ret.Token}
			for _, t := range []int64{lost[lk], releasing[lk], dead[c.W]} {
				if t != 0 && t < s.To {
					s.To = t
				}
			}
			acquires = append(acquires, s)
		case OpWrite:
			r.Writes++
			op := porcupine.Operation{ClientId: c.W, Input: regInput{Key: c.Key, Write: true, Token: c.Token, Val: c.Val}, Call: c.T}
			if done && (ret.Res == ResOK || ret.Res == ResStale) {
				op.Output, op.Return = regOutput{Accepted: ret.Res == ResOK}, ret.T
			} else {
				r.Unknown++
				op.Output, op.Return = regOutput{Unknown: true}, math.MaxInt64
			}
			r.ops = append(r.ops, op)
		case OpRead:
			if done && ret.Res == ResOK { // a failed read changed nothing
				r.ops = append(r.ops, porcupine.Operation{ClientId: c.W, Input: regInput{Key: c.Key},
					Call: c.T, Output: regOutput{Token: ret.Token, Val: ret.Val}, Return: ret.T})
			}
		}
	}
	slices.SortFunc(acquires, func(a, b leaseSpan) int { return cmp.Compare(a.From, b.From) })
	slices.SortFunc(r.ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	r.leases = acquires
	r.Acquisitions = len(acquires)

	// Overlaps: two workers believing they hold the same key at once (of
	// a reader-writer lock: a writer and anyone else). A belief ends when
	// the worker's goroutine saw the loss, a moment after the lease's
	// validity ended: overlaps no longer than overlapSlack are that lag,
	// not a holder believing too long, and do not count against the
	// fault's bound.
	long := 0
	var which []string // the first long overlaps, for the violation
	slack := int64(overlapSlack(r.TTL))
	episodes := lossEpisodes(events)
	if r.Kind == KindSemaphore {
		r.Overlaps, long = semaphoreOverlaps(acquires, max(r.Limit, 1), episodes, r.TTL)
	} else {
		for i, a := range acquires {
			for _, b := range acquires[i+1:] { // a.From <= b.From
				if a.Key == b.Key && a.W != b.W && b.From < a.To && a.From < b.To && (exclusive(a.Kind) || exclusive(b.Kind)) {
					r.Overlaps++
					if min(a.To, b.To)-max(a.From, b.From) > slack && !crashOverlap(a, b, episodes, r.TTL) {
						long++
						if len(which) < 3 {
							which = append(which, describeOverlap(a, b, episodes))
						}
					}
				}
			}
		}
	}
	if bound, ok := overlapBound[r.Fault]; ok && long > bound {
		what := "a holder believed it held a key another worker had been granted"
		switch r.Kind {
		case KindSemaphore:
			what = fmt.Sprintf("more than %d workers believed they held a slot of the semaphore at once", max(r.Limit, 1))
		case KindRW:
			what = "a writer believed it held the key while another reader or writer did"
		}
		r.Violations = append(r.Violations, fmt.Sprintf(
			"%d overlapping leases under fault %s (longer than %v), where at most %d may be: %s",
			long, r.Fault, time.Duration(slack), bound, what))
		r.Violations = append(r.Violations, which...)
	}

	v, regressions := checkTokens(acquires, episodes, r.TTL)
	r.Violations = append(r.Violations, v...)
	r.TokenRegressions = regressions

	// The register's own view: a write accepted with a token lower than one
	// accepted before it.
	for _, a := range applied {
		if !a.Accepted {
			r.StaleRefused++
		} else if a.Stale {
			r.StaleAccepted++
			if r.StaleAccepted <= 5 {
				r.Violations = append(r.Violations, fmt.Sprintf("register accepted a stale write on %q: token %d after token %d", a.Key, a.Token, a.Highest))
			}
		}
	}
	if r.StaleAccepted > 5 {
		r.Violations = append(r.Violations, fmt.Sprintf("... %d stale writes accepted in all", r.StaleAccepted))
	}
	r.Violations = append(r.Violations, checkClientWrites(r.ops)...)

	res, info := porcupine.CheckOperationsVerbose(FencedRegister, r.ops, timeout)
	r.Linearizable, r.info = res, info
	switch res {
	case porcupine.Illegal:
		r.Violations = append(r.Violations, "the register's history is not linearizable against the fenced-register model")
	case porcupine.Unknown:
		r.Violations = append(r.Violations, fmt.Sprintf("linearizability check did not finish within %v", timeout))
	}
}

// checkTokens: tokens strictly increase per key in acquisition order (an
// acquisition that returned before another began has the lower token:
// each that has not is a regression);
// no token is granted twice; and no exclusive acquisition is reported held
// after one with a higher token was, nor a reader after a writer with a
// higher token (its reply came after its lease had expired: the store
// grants the higher one only once the lower one has ended). DESIGN.md
// section 3 makes the first two promises for every acquisition of a key,
// semaphore slots and both sides of a reader-writer lock included (the
// conformance suite checks them so); semaphore slots and readers share the
// key, so one of them may well be reported after another's higher token.
// A late reply that a loss of the store's state explains (crashOverlap:
// a cut-off master granted the lower token, and the side that took over
// never learnt of it) is that loss's overlap, which the fault's bound
// judges, not a late reply.
func checkTokens(acquires []leaseSpan, episodes []lossEpisode, ttl time.Duration) (v []string, regressions int) {
	byKey := map[string][]leaseSpan{}
	for _, a := range acquires {
		byKey[a.Key] = append(byKey[a.Key], a)
		if a.Valid <= 0 && a.Valid != validUnknown {
			v = append(v, fmt.Sprintf("worker %d was reported holding %q (token %d) with no validity left", a.W, a.Key, a.Token))
		}
	}
	for key, as := range byKey { // sorted by return time
		seen := map[int64]int{}
		for _, a := range as {
			if w, dup := seen[a.Token]; dup {
				v = append(v, fmt.Sprintf("token %d for %q granted twice (workers %d and %d)", a.Token, key, w, a.W))
			}
			seen[a.Token] = a.W
		}
		byCall := slices.Clone(as)
		slices.SortFunc(byCall, func(a, b leaseSpan) int { return cmp.Compare(a.Call, b.Call) })
		// Sweep: the highest token among acquisitions returned before b began.
		var hi leaseSpan
		i := 0
		for _, b := range byCall {
			for i < len(as) && as[i].From < b.Call {
				if as[i].Token > hi.Token {
					hi = as[i]
				}
				i++
			}
			if hi.Token >= b.Token {
				regressions++
				v = append(v, fmt.Sprintf("tokens for %q went back: worker %d got %d after worker %d had got %d", key, b.W, b.Token, hi.W, hi.Token))
			}
		}
		var top, topExclusive leaseSpan
		for _, a := range as { // by return time
			late := topExclusive
			if exclusive(a.Kind) {
				late = top
			}
			if a.Token < late.Token && !crashOverlap(a, late, episodes, ttl) {
				v = append(v, fmt.Sprintf("worker %d was reported holding %q with token %d after worker %d had been granted token %d: a late reply reported as held",
					a.W, key, a.Token, late.W, late.Token))
			}
			if a.Token > top.Token {
				top = a
			}
			if exclusive(a.Kind) && a.Token > topExclusive.Token {
				topExclusive = a
			}
		}
	}
	slices.Sort(v)
	return v, regressions
}

// exclusive reports whether a lease of kind (Event.Kind) excludes every
// other holder of its key: a lock's or a writer's, not a reader's or a
// semaphore slot's.
func exclusive(kind string) bool {
	return kind == "" || kind == fence.KindWrite.String()
}

// semaphoreOverlaps counts the episodes in which more workers than limit
// believed they held a slot of one semaphore at once (overlaps), and how
// many of them count against the fault's bound (long): those longer than
// overlapSlack once every lease a loss of the store's state explains is
// taken to end where that loss's episode began. That is crashOverlap's
// rule for any number of holders: the store forgot the leases granted
// before the loss, and may grant their slots again after the episode
// began, while their holders believe in them for up to a TTL more.
func semaphoreOverlaps(acquires []leaseSpan, limit int, episodes []lossEpisode, ttl time.Duration) (overlaps, long int) {
	slack := int64(overlapSlack(ttl))
	byKey := map[string][]leaseSpan{}
	for _, a := range acquires {
		byKey[a.Key] = append(byKey[a.Key], a)
	}
	for _, spans := range byKey {
		overlaps += len(crowded(spans, limit))
		forgotten := slices.Clone(spans)
		for i, s := range spans {
			for _, ep := range episodes {
				if s.From < ep.Loss && s.To <= ep.Loss+int64(ttl)+slack {
					forgotten[i].To = min(forgotten[i].To, max(s.From, ep.Start))
				}
			}
		}
		for _, c := range crowded(forgotten, limit) {
			if c[1]-c[0] > slack {
				long++
			}
		}
	}
	return overlaps, long
}

// crowded returns the intervals, [from, to), in which more than limit of
// spans were believed held at once.
func crowded(spans []leaseSpan, limit int) [][2]int64 {
	type edge struct {
		t int64
		d int // +1 a belief begins, -1 one ends
	}
	edges := make([]edge, 0, 2*len(spans))
	for _, s := range spans {
		if s.From < s.To {
			edges = append(edges, edge{s.From, 1}, edge{s.To, -1})
		}
	}
	// Ends first: a belief that ends as another begins does not overlap it.
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.d, b.d)) })
	var out [][2]int64
	n := 0
	for _, e := range edges {
		n += e.d
		switch {
		case e.d > 0 && n == limit+1:
			out = append(out, [2]int64{e.t, 0})
		case e.d < 0 && n == limit:
			out[len(out)-1][1] = e.t
		}
	}
	return out
}

// checkClientWrites: as the writers saw it, no write was accepted with a
// token lower than one whose acceptance had already returned.
func checkClientWrites(ops []porcupine.Operation) []string {
	var accepted []porcupine.Operation
	for _, op := range ops {
		in, out := op.Input.(regInput), op.Output.(regOutput)
		if in.Write && !out.Unknown && out.Accepted {
			accepted = append(accepted, op)
		}
	}
	byRet := slices.Clone(accepted)
	slices.SortFunc(byRet, func(a, b porcupine.Operation) int { return cmp.Compare(a.Return, b.Return) })
	var v []string
	hi := map[string]porcupine.Operation{}
	i := 0
	for _, b := range accepted { // by call time
		for i < len(byRet) && byRet[i].Return < b.Call {
			k := byRet[i].Input.(regInput).Key
			if byRet[i].Input.(regInput).Token > tokenOf(hi[k]) {
				hi[k] = byRet[i]
			}
			i++
		}
		in := b.Input.(regInput)
		if h, ok := hi[in.Key]; ok && tokenOf(h) > in.Token {
			if len(v) < 5 {
				v = append(v, fmt.Sprintf("worker %d's write with token %d on %q was accepted after worker %d's write with token %d had been",
					b.ClientId, in.Token, in.Key, h.ClientId, tokenOf(h)))
			}
		}
	}
	return v
}

func tokenOf(op porcupine.Operation) int64 {
	if op.Input == nil {
		return 0
	}
	return op.Input.(regInput).Token
}
