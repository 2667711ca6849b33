package main

import (
	"fmt"
	"io"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/term"
)

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool { return term.IsTerminal(int(f.Fd())) }

// isLiveTerminal reports whether f is a terminal that understands the
// escape sequences fence redraws its live status with: not TERM=dumb.
func isLiveTerminal(f *os.File) bool {
	return isTerminal(f) && os.Getenv("TERM") != "dumb"
}

// termSize returns f's width and height in cells, 80x24 if unknown.
func termSize(f *os.File) (width, height int) {
	w, h, err := term.GetSize(int(f.Fd()))
	if err != nil || w <= 0 || h <= 0 {
		return 80, 24
	}
	return w, h
}

// Escape sequences (ECMA-48) for redrawing in place.
const (
	eraseLine   = "\x1b[K"  // erase from the cursor to the end of the line
	eraseBelow  = "\x1b[J"  // erase from the cursor to the end of the screen
	cursorHome  = "\x1b[H"  // move the cursor to the top left
	eraseScreen = "\x1b[2J" // erase the whole screen
)

// statusLine is a one-line status redrawn in place on a terminal: each
// show replaces the previous line, clear erases it.
type statusLine struct {
	w     io.Writer
	width func() int
	shown bool
}

func newStatusLine(f *os.File) *statusLine {
	return &statusLine{w: f, width: func() int { w, _ := termSize(f); return w }}
}

// show replaces the line with s, cut to the terminal's width: a line that
// wrapped could not be redrawn with a carriage return.
func (l *statusLine) show(s string) {
	fmt.Fprint(l.w, "\r"+truncate(s, l.width()-1)+eraseLine)
	l.shown = true
}

// clear erases the line, leaving the cursor at its start.
func (l *statusLine) clear() {
	if l.shown {
		fmt.Fprint(l.w, "\r"+eraseLine)
		l.shown = false
	}
}

// truncate cuts s to at most n runes, ending it with "…" if cut. Runes
// are taken as one cell each, which holds for the text fence prints
// except keys in wide scripts.
func truncate(s string, n int) string {
	if n < 1 {
		n = 1
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	var b strings.Builder
	i := 0
	for _, r := range s {
		if i == n-1 {
			break
		}
		b.WriteRune(r)
		i++
	}
	b.WriteString("…")
	return b.String()
}

// short formats d compactly for live displays: 0.4s, 9.9s, 42s, 3m07s,
// 2h05m.
func short(d time.Duration) string {
	switch {
	case d < 0:
		d = 0
		fallthrough
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	default:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
}

// shortOwner shortens an owner id for a narrow display: the readable
// prefix and the first 8 hex digits of the random part.
func shortOwner(owner string) string {
	i := strings.LastIndexByte(owner, '-')
	random := owner[i+1:]
	if len(random) <= 12 {
		return owner
	}
	return owner[:i+1] + random[:8] + "…"
}
