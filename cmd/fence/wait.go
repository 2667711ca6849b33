package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/fencing/fence"
)

// How often a waiting fence asks the store who holds the key, and how
// often it redraws the live status line on a terminal. The wait itself
// is the library's (notifications, backoff); this only informs.
const (
	inspectEvery = time.Second
	redrawEvery  = 500 * time.Millisecond
)

// snapshot is what the store said about the held key at one moment.
type snapshot struct {
	holder *fence.Holder // nil if unknown or free
	err    error         // nil, ErrNotHeld (free), ErrUnavailable, or why fence cannot tell
	at     time.Time
}

func (s snapshot) identity() string {
	if s.holder == nil {
		return ""
	}
	return fmt.Sprintf("%s/%d", s.holder.Owner, s.holder.Token)
}

// waitView shows a wait for a held key: on a terminal (text mode) a live
// status line, redrawn in place and erased when the wait ends; otherwise
// a "waiting" message when the wait starts and whenever the holder
// changes.
type waitView struct {
	ev    *events
	st    *store
	key   string
	start time.Time
	limit time.Duration // --wait, 0 if none
	live  bool

	last      snapshot
	announced string // identity of the holder last announced, non-live
	first     bool
}

func newWaitView(ev *events, st *store, key string, limit time.Duration, live bool) *waitView {
	if live {
		ev.mu.Lock()
		ev.live = newStatusLine(os.Stderr)
		ev.mu.Unlock()
	}
	return &waitView{ev: ev, st: st, key: key, start: time.Now(), limit: limit, live: live, first: true}
}

// update takes a new snapshot of the holder.
func (v *waitView) update(s snapshot) {
	v.last = s
	if v.live {
		v.redraw()
		return
	}
	id := s.identity()
	if !v.first && (id == "" || id == v.announced) {
		return
	}
	e := event{Event: "waiting", WaitedMS: int64p(time.Since(v.start).Milliseconds())}
	who := ""
	if s.holder != nil {
		j := toJSON(*s.holder, time.Now())
		e.Holder = &j
		who = ", held by " + describe(*s.holder, time.Now())
	}
	if why := storeTrouble(s.err); why != "" {
		who = ": " + why
	}
	if v.first {
		e.Message = fmt.Sprintf("waiting for %q%s", v.key, who)
	} else {
		e.Message = fmt.Sprintf("still waiting for %q after %s%s", v.key, roundDur(time.Since(v.start)), who)
	}
	v.first = false
	v.announced = id
	v.ev.emit(e, true)
}

// redraw draws the live line from the last snapshot, extrapolating the
// holder's time left.
func (v *waitView) redraw() {
	if v.live {
		v.ev.showLive(v.line(time.Now()))
	}
}

// line is the live status line at now.
func (v *waitView) line(now time.Time) string {
	waited := short(now.Sub(v.start))
	if v.limit > 0 {
		waited += " of " + short(v.limit)
	}
	head := fmt.Sprintf("fence: waiting %s for %q: ", waited, v.key)
	s := v.last
	switch {
	case s.holder != nil:
		return head + "held by " + describeLive(*s.holder, now, now.Sub(s.at))
	case errors.Is(s.err, fence.ErrNotHeld):
		return head + "free now, taking it…"
	case storeTrouble(s.err) != "":
		return head + storeTrouble(s.err)
	case errors.Is(s.err, fence.ErrUnsupported):
		return head + "held (this store cannot tell by whom)"
	case s.err != nil:
		return head + "held; cannot tell by whom: " + trimFence(s.err.Error())
	}
	return head + "held"
}

// storeTrouble says why a wait goes on that did not find the key held:
// the store answered that it cannot grant for now, or its grant came
// back after the lease's validity (see waitsOn). "" for any other err.
func storeTrouble(err error) string {
	switch {
	case errors.Is(err, fence.ErrUnavailable):
		return "the store is unavailable: " + trimFence(err.Error())
	case errors.Is(err, fence.ErrLost):
		return "the store's grant came back too late: " + trimFence(err.Error())
	}
	return ""
}

// end erases the live line: the wait is over.
func (v *waitView) end() { v.ev.endLive() }

// describeLive describes a holder in a line meant to fit a terminal: a
// short owner id, and the time left as of now, seen age ago.
func describeLive(h fence.Holder, now time.Time, age time.Duration) string {
	var parts []string
	if host := h.Meta["host"]; host != "" {
		parts = append(parts, host)
	}
	if pid := h.Meta["pid"]; pid != "" {
		parts = append(parts, "pid "+pid)
	}
	if h.Token > 0 {
		parts = append(parts, fmt.Sprintf("token %d", h.Token))
	}
	if at, err := time.Parse(time.RFC3339Nano, h.Meta["acquired_at"]); err == nil {
		parts = append(parts, "held "+short(now.Sub(at)))
	}
	if h.ExpiresIn > 0 {
		parts = append(parts, short(max(0, h.ExpiresIn-age))+" left")
	} else {
		parts = append(parts, "until released")
	}
	owner := shortOwner(h.Owner)
	if owner == "" {
		owner = "an unknown owner"
	}
	return fmt.Sprintf("%s (%s)", owner, strings.Join(parts, ", "))
}

// pollHolder asks the store who holds key every inspectEvery and sends
// the latest answer on out (buffered, one: an unread answer is
// replaced), until ctx ends. It stops early if the store cannot tell.
func pollHolder(ctx context.Context, st *store, key string, out chan snapshot) {
	t := time.NewTicker(inspectEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ictx, cancel := context.WithTimeout(ctx, storeTimeout)
		h, err := st.client.Inspect(ictx, key)
		cancel()
		if ctx.Err() != nil {
			return
		}
		s := snapshot{err: err, at: time.Now()}
		if err == nil {
			s.holder = &h
		}
		select {
		case <-out:
		default:
		}
		out <- s
		if errors.Is(err, fence.ErrUnsupported) {
			return
		}
	}
}

// waitFor waits for the held key, showing who holds it. It returns the
// signal that interrupted the wait, if one did.
func waitFor(ctx context.Context, st *store, f runFlags, opts []fence.AcquireOption, heldErr error,
	ev *events, sigs <-chan os.Signal) (*fence.Lease, error, os.Signal) {
	view := newWaitView(ev, st, f.key, f.wait, !f.json && isLiveTerminal(os.Stderr))
	defer view.end()
	first := snapshot{at: time.Now()}
	var held *fence.HeldError
	switch {
	case errors.As(heldErr, &held) && held.Holder != nil:
		first.holder = held.Holder
	case storeTrouble(heldErr) != "":
		first.err = heldErr
	default:
		ictx, cancel := context.WithTimeout(ctx, storeTimeout)
		h, err := st.client.Inspect(ictx, f.key)
		cancel()
		first.err = err
		if err == nil {
			first.holder = &h
		}
	}
	view.update(first)

	type result struct {
		l   *fence.Lease
		err error
	}
	res := make(chan result, 1)
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		l, err := st.client.Acquire(actx, f.key, append(opts, fence.WithWait(f.wait))...)
		res <- result{l, err}
	}()

	snaps := make(chan snapshot, 1)
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		pollHolder(actx, st, f.key, snaps)
	}()
	defer func() { cancel(); <-polled }()

	var redraw <-chan time.Time
	if view.live {
		t := time.NewTicker(redrawEvery)
		defer t.Stop()
		redraw = t.C
	}
	for {
		select {
		case r := <-res:
			return r.l, st.wrap(r.err), nil
		case s := <-sigs:
			if !stops(s) {
				continue
			}
			cancel()
			if r := <-res; r.l != nil {
				_ = r.l.Release(context.Background())
			}
			return nil, nil, s
		case s := <-snaps:
			view.update(s)
		case <-redraw:
			view.redraw()
		}
	}
}

// waitersOf returns how many contenders wait for key, nil if the store
// cannot tell.
func waitersOf(st *store, key string) *int {
	wc, ok := st.client.Driver().(fence.WaiterCounter)
	if !ok {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	n, err := wc.Waiters(ctx, key)
	if err != nil {
		return nil
	}
	return &n
}
