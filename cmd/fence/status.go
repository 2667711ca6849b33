package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/fencing/fence"
)

const statusSynopsis = "fence status [--store URL] --key K [--json]"

// cmdStatus implements "fence status": exit 0 if the key is held, 3 if it
// is free.
func cmdStatus(args []string, stdout, stderr io.Writer) int {
	fs, store, jsonOut := newFlags("status")
	key := fs.String("key", "", "the lock's key (required)")
	ev := &events{w: stderr, json: wantsJSON(fs, args)}
	err := parseFlags(fs, statusSynopsis, args, stdout)
	ev.key = *key
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
	case *key == "":
		err = usagef("status: --key is required; usage: %s", statusSynopsis)
	case fs.NArg() > 0:
		err = usagef("status: unexpected arguments %q; usage: %s", fs.Args(), statusSynopsis)
	default:
		err = fence.ValidateKey(*key)
	}
	if err != nil {
		return ev.fail(err)
	}
	ev.json = *jsonOut
	ctx := context.Background()
	st, err := openStore(ctx, *store)
	if err != nil {
		return ev.fail(err)
	}
	defer st.Close()
	st.warn(ev)

	ictx, cancel := context.WithTimeout(ctx, storeTimeout)
	h, err := st.client.Inspect(ictx, *key)
	cancel()
	now := time.Now()
	switch {
	case errors.Is(err, fence.ErrNotHeld):
		if *jsonOut {
			writeJSON(stdout, struct {
				Key  string `json:"key"`
				Held bool   `json:"held"`
			}{*key, false})
		} else {
			fmt.Fprintf(stdout, "%q: free\n", *key)
		}
		return exitFree
	case err != nil:
		return ev.fail(st.wrap(err))
	}
	j := toJSON(h, now)
	j.Waiters = waitersOf(st, *key)
	if *jsonOut {
		writeJSON(stdout, j)
		return exitOK
	}
	waiting := ""
	if j.Waiters != nil {
		waiting = fmt.Sprintf(", %d waiting", *j.Waiters)
	}
	fmt.Fprintf(stdout, "%q: held by %s%s\n", *key, describe(h, now), waiting)
	return exitOK
}

const listSynopsis = "fence list [--store URL] [--prefix P] [--watch [--interval 1s]] [--json]"

// cmdList implements "fence list" and "fence list --watch".
func cmdList(args []string, stdout, stderr io.Writer) int {
	fs, store, jsonOut := newFlags("list")
	prefix := fs.String("prefix", "", "show only keys starting with this")
	watch := fs.Bool("watch", false, "show the keys live, refreshed every --interval, until interrupted")
	var interval time.Duration
	durationFlag(fs, &interval, "interval", time.Second, "with --watch, refresh every `duration`")
	ev := &events{w: stderr, json: wantsJSON(fs, args)}
	err := parseFlags(fs, listSynopsis, args, stdout)
	intervalSet := false
	fs.Visit(func(f *flag.Flag) { intervalSet = intervalSet || f.Name == "interval" })
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
	case fs.NArg() > 0:
		err = usagef("list: unexpected arguments %q; usage: %s", fs.Args(), listSynopsis)
	case intervalSet && !*watch:
		err = usagef("list: --interval goes with --watch")
	case interval < minInterval:
		err = usagef("list: --interval %v is too short: at least %v", interval, minInterval)
	}
	if err != nil {
		return ev.fail(err)
	}
	ev.json = *jsonOut
	ctx := context.Background()
	st, err := openStore(ctx, *store)
	if err != nil {
		return ev.fail(err)
	}
	defer st.Close()
	st.warn(ev)
	if *watch {
		return watchList(ctx, st, *prefix, interval, stdout, ev)
	}
	l := fetch(ctx, st, *prefix)
	if l.err != nil {
		return ev.fail(l.err)
	}
	if *jsonOut {
		writeJSON(stdout, l.holders(time.Now()))
		return exitOK
	}
	writeTable(stdout, l, time.Now(), false)
	return exitOK
}

// listing is what the store said about its held keys at one moment.
type listing struct {
	at      time.Time
	hs      []fence.Holder
	waiters []*int // per holder; nil entries where the store cannot tell
	err     error
}

// fetch lists the held keys starting with prefix, and their waiters
// where the store can count them.
func fetch(ctx context.Context, st *store, prefix string) listing {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	hs, err := st.client.List(ctx, prefix)
	l := listing{at: time.Now(), hs: hs, err: st.wrap(err)}
	if err != nil {
		return l
	}
	l.waiters = make([]*int, len(hs))
	if wc, ok := st.client.Driver().(fence.WaiterCounter); ok {
		for i, h := range hs {
			if n, err := wc.Waiters(ctx, h.Key); err == nil {
				l.waiters[i] = &n
			}
		}
	}
	return l
}

// holders returns the listing as JSON holder objects, as of now.
func (l listing) holders(now time.Time) []holderJSON {
	out := make([]holderJSON, 0, len(l.hs))
	for i, h := range l.hs {
		h.ExpiresIn = expiresAt(h, now, l.at)
		j := toJSON(h, now)
		j.Waiters = l.waiters[i]
		out = append(out, j)
	}
	return out
}

// expiresAt returns h's time left at now, h having been read at read;
// 0 stays 0 (until released, or unknown).
func expiresAt(h fence.Holder, now, read time.Time) time.Duration {
	if h.ExpiresIn <= 0 {
		return 0
	}
	return max(time.Millisecond, h.ExpiresIn-now.Sub(read))
}

// writeTable writes the listing as a table, as of now; with narrow,
// owner ids are shortened to fit a terminal.
func writeTable(w io.Writer, l listing, now time.Time, narrow bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tHOLDER\tHOST\tPID\tTOKEN\tHELD FOR\tTIME LEFT\tWAITERS")
	for i, h := range l.hs {
		j := toJSON(h, now)
		owner := h.Owner
		if narrow {
			owner = shortOwner(owner)
		}
		held, left, waiters := "-", "until released", "-"
		if j.AcquiredAt != "" {
			held = roundDur(time.Duration(j.HeldForMS) * time.Millisecond)
		}
		if d := expiresAt(h, now, l.at); d > 0 {
			left = roundDur(d)
		}
		if n := l.waiters[i]; n != nil {
			waiters = fmt.Sprint(*n)
		}
		fmt.Fprintf(tw, "%q\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", h.Key, dash(owner), dash(j.Host), dash(h.Meta["pid"]),
			tokenText(h.Token), held, left, waiters)
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func tokenText(t int64) string {
	if t <= 0 {
		return "-"
	}
	return fmt.Sprint(t)
}

func writeJSON(w io.Writer, v any) {
	b, _ := json.Marshal(v)
	w.Write(append(b, '\n'))
}

// plural returns "1 key", "2 keys".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
