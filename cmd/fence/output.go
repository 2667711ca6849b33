package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fencing/fence"
)

// holderJSON is the JSON shape of a holder, in "status", "list" and the
// events of "run". Every field is always present; durations are in
// milliseconds; 0 and "" mean unknown (expires_in_ms 0: the lease lasts
// until its holder releases it or exits, or the store cannot tell).
type holderJSON struct {
	Key         string            `json:"key"`
	Held        bool              `json:"held"`
	Owner       string            `json:"owner"`
	Token       int64             `json:"token"`
	Host        string            `json:"host"`
	PID         int               `json:"pid"`
	AcquiredAt  string            `json:"acquired_at"`
	HeldForMS   int64             `json:"held_for_ms"`
	ExpiresInMS int64             `json:"expires_in_ms"`
	Meta        map[string]string `json:"meta"`
	// Waiters is how many contenders wait for the key; null where the
	// store cannot tell (most stores), or in the events of "run".
	Waiters *int `json:"waiters"`
}

func toJSON(h fence.Holder, now time.Time) holderJSON {
	j := holderJSON{
		Key: h.Key, Held: true, Owner: h.Owner, Token: h.Token,
		Host: h.Meta["host"], ExpiresInMS: h.ExpiresIn.Milliseconds(), Meta: h.Meta,
	}
	if j.Meta == nil {
		j.Meta = map[string]string{}
	}
	j.PID, _ = strconv.Atoi(h.Meta["pid"])
	if at, err := time.Parse(time.RFC3339Nano, h.Meta["acquired_at"]); err == nil {
		j.AcquiredAt = at.UTC().Format(time.RFC3339Nano)
		j.HeldForMS = max(0, now.Sub(at).Milliseconds())
	}
	return j
}

// describe returns a one-line, human description of a holder.
func describe(h fence.Holder, now time.Time) string {
	var parts []string
	if host := h.Meta["host"]; host != "" {
		parts = append(parts, "host "+host)
	}
	if pid := h.Meta["pid"]; pid != "" {
		parts = append(parts, "pid "+pid)
	}
	if h.Token > 0 {
		parts = append(parts, fmt.Sprintf("token %d", h.Token))
	}
	if at, err := time.Parse(time.RFC3339Nano, h.Meta["acquired_at"]); err == nil {
		parts = append(parts, "held for "+roundDur(now.Sub(at)))
	}
	if h.ExpiresIn > 0 {
		parts = append(parts, "expires in "+roundDur(h.ExpiresIn))
	} else {
		parts = append(parts, "until released")
	}
	owner := h.Owner
	if owner == "" {
		owner = "an unknown owner"
	}
	return fmt.Sprintf("%s (%s)", owner, strings.Join(parts, ", "))
}

func roundDur(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(100 * time.Millisecond).String()
	}
}

// events writes the messages of "fence run": JSON lines with --json,
// "fence: ..." lines otherwise, on stderr. While fence waits on a
// terminal, a live status line sits below them (see waitView).
type events struct {
	mu   sync.Mutex
	w    io.Writer
	json bool
	key  string
	live *statusLine // shown while waiting on a terminal, else nil
}

// event is one JSON line of "fence run". See docs/cli.md for the schema.
type event struct {
	Event    string            `json:"event"`
	Time     string            `json:"time"`
	Key      string            `json:"key"`
	Store    string            `json:"store,omitempty"`
	Token    int64             `json:"token,omitempty"`
	Tokens   map[string]int64  `json:"tokens,omitempty"` // fence run --keys
	Owner    string            `json:"owner,omitempty"`
	Holder   *holderJSON       `json:"holder,omitempty"`
	PID      int               `json:"pid,omitempty"`
	Signal   string            `json:"signal,omitempty"`
	ExitCode *int              `json:"exit_code,omitempty"`
	WaitedMS *int64            `json:"waited_ms,omitempty"`
	Reason   string            `json:"reason,omitempty"`
	Error    string            `json:"error,omitempty"`
	Hint     string            `json:"hint,omitempty"`
	Addr     string            `json:"addr,omitempty"`
	Level    string            `json:"level,omitempty"`
	Attrs    map[string]string `json:"attrs,omitempty"`
	Message  string            `json:"message"`
}

// emit writes ev; in text mode only if text is set, as "fence: text".
func (e *events) emit(ev event, text bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.json {
		if text {
			if e.live != nil {
				e.live.clear() // redrawn by the next tick
			}
			fmt.Fprintf(e.w, "fence: %s\n", ev.Message)
			if ev.Hint != "" {
				fmt.Fprintf(e.w, "  %s\n", strings.ReplaceAll(ev.Hint, "\n", "\n  "))
			}
		}
		return
	}
	ev.Time = time.Now().UTC().Format(time.RFC3339Nano)
	ev.Key = e.key
	b, _ := json.Marshal(ev)
	e.w.Write(append(b, '\n'))
}

// showLive draws s as the live status line, if there is one.
func (e *events) showLive(s string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.live != nil {
		e.live.show(s)
	}
}

// endLive erases the live status line and stops drawing it.
func (e *events) endLive() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.live != nil {
		e.live.clear()
		e.live = nil
	}
}

// fail reports an error that ends a command, and returns the exit status
// for it.
func (e *events) fail(err error) int {
	e.endLive()
	if !e.json {
		return exitFor(e.w, err)
	}
	e.emit(event{Event: "error", Error: err.Error(), Hint: hint(err), Message: errorText(err)}, false)
	return errorStatus(err)
}

func intp(i int) *int       { return &i }
func int64p(i int64) *int64 { return &i }
