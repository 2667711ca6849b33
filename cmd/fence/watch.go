package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fencing/fence"
)

// minInterval is the shortest --interval of "fence list --watch".
const minInterval = 100 * time.Millisecond

// watchJSON is one line of "fence list --watch --json": the held keys at
// one refresh. See docs/cli.md.
type watchJSON struct {
	Time    string       `json:"time"`
	Store   string       `json:"store"`
	Prefix  string       `json:"prefix"`
	Changed bool         `json:"changed"`
	Keys    []holderJSON `json:"keys,omitempty"`
	Count   *int         `json:"count,omitempty"`
	Error   string       `json:"error,omitempty"`
	Hint    string       `json:"hint,omitempty"`
}

// watchList shows the held keys every interval until SIGINT, SIGTERM or
// SIGHUP: on a terminal a table redrawn in place; otherwise a new table
// whenever something changed, or with --json one object per refresh.
func watchList(ctx context.Context, st *store, prefix string, interval time.Duration, stdout io.Writer, ev *events) int {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()

	l := fetch(ctx, st, prefix)
	if errors.Is(l.err, fence.ErrUnsupported) {
		return ev.fail(l.err)
	}
	var screen *os.File
	if f, ok := stdout.(*os.File); ok && !ev.json && isLiveTerminal(f) {
		screen = f
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	var last string // what the previous refresh showed, for "changed"
	for frame := 0; ; frame++ {
		if ctx.Err() != nil {
			return exitOK
		}
		now := time.Now()
		sig := signature(l)
		changed := frame == 0 || sig != last
		last = sig
		switch {
		case ev.json:
			writeJSON(stdout, watchObject(st, prefix, l, now, changed))
		case screen != nil:
			drawFrame(screen, st, prefix, interval, l, now, frame == 0)
		case changed:
			writeChange(stdout, st, l, now)
		}
		select {
		case <-ctx.Done():
			return exitOK
		case <-t.C:
		}
		l = fetch(ctx, st, prefix)
	}
}

// signature is what a listing shows apart from the passing time: keys,
// holders, tokens, waiters, or the error.
func signature(l listing) string {
	if l.err != nil {
		return "error: " + l.err.Error()
	}
	var b strings.Builder
	for i, h := range l.hs {
		fmt.Fprintf(&b, "%q %q %d %q %q", h.Key, h.Owner, h.Token, h.Meta["host"], h.Meta["pid"])
		if n := l.waiters[i]; n != nil {
			fmt.Fprintf(&b, " %d", *n)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func watchObject(st *store, prefix string, l listing, now time.Time, changed bool) watchJSON {
	o := watchJSON{Time: now.UTC().Format(time.RFC3339Nano), Store: st.url, Prefix: prefix, Changed: changed}
	if l.err != nil {
		o.Error, o.Hint = errorText(l.err), hint(l.err)
		return o
	}
	o.Keys = l.holders(now)
	o.Count = intp(len(o.Keys))
	return o
}

// writeChange prints a listing that differs from the previous one, for a
// log: a time-stamped heading, then the table.
func writeChange(w io.Writer, st *store, l listing, now time.Time) {
	stamp := now.UTC().Format(time.RFC3339)
	if l.err != nil {
		fmt.Fprintf(w, "%s  cannot list: %s\n", stamp, errorText(l.err))
		if h := hint(l.err); h != "" {
			fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(h, "\n", "\n  "))
		}
		fmt.Fprintln(w)
		return
	}
	if len(l.hs) == 0 {
		fmt.Fprintf(w, "%s  no keys held in %s\n", stamp, st.url)
	} else {
		fmt.Fprintf(w, "%s  %s held in %s\n", stamp, plural(len(l.hs), "key"), st.url)
		writeTable(w, l, now, false)
	}
	fmt.Fprintln(w)
}

// drawFrame redraws the whole screen with the listing: a heading, then
// the table cut to the terminal's size, each line erased to its end so
// that nothing of the previous frame stays.
func drawFrame(f *os.File, st *store, prefix string, interval time.Duration, l listing, now time.Time, first bool) {
	width, height := termSize(f)
	where := "store " + st.url
	if prefix != "" {
		where += fmt.Sprintf(", keys starting with %q", prefix)
	}
	lines := []string{
		fmt.Sprintf("fence list --watch  %s  every %v  (Ctrl-C to stop)", now.Format("15:04:05"), interval),
		where,
	}
	if l.err != nil {
		lines = append(lines, "cannot list: "+errorText(l.err))
		if h := hint(l.err); h != "" {
			lines = append(lines, strings.Split(h, "\n")...)
		}
	} else if len(l.hs) == 0 {
		lines = append(lines, "no keys held")
	} else {
		lines = append(lines, plural(len(l.hs), "key")+" held", "")
		var table bytes.Buffer
		writeTable(&table, l, now, true)
		rows := strings.Split(strings.TrimSuffix(table.String(), "\n"), "\n")
		if room := height - 1 - len(lines); len(rows) > room && room > 1 {
			more := len(rows) - (room - 1)
			rows = append(slices.Clip(rows[:room-1]), fmt.Sprintf("… %d more (--prefix narrows the list)", more))
		}
		lines = append(lines, rows...)
	}
	var b bytes.Buffer
	if first {
		b.WriteString(eraseScreen)
	}
	b.WriteString(cursorHome)
	for _, line := range lines {
		b.WriteString(truncate(line, width-1) + eraseLine + "\r\n")
	}
	b.WriteString(eraseBelow)
	f.Write(b.Bytes())
}
