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

// cmdStatus implements "fence status": exit 0 if the key is held, 3 if it
// is free.
func cmdStatus(args []string, stdout, stderr io.Writer) int {
	fs, store, jsonOut := newFlags("status", "fence status [--store URL] --key K [--json]", stderr)
	key := fs.String("key", "", "the lock's key (required)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	switch {
	case *key == "":
		return exitFor(stderr, usagef("status: --key is required"))
	case fs.NArg() > 0:
		return exitFor(stderr, usagef("status: unexpected arguments %q", fs.Args()))
	}
	if err := fence.ValidateKey(*key); err != nil {
		return exitFor(stderr, err)
	}
	ctx := context.Background()
	client, closeStore, _, err := openStore(ctx, *store)
	if err != nil {
		return exitFor(stderr, err)
	}
	defer closeStore()

	h, err := client.Inspect(ctx, *key)
	now := time.Now()
	switch {
	case errors.Is(err, fence.ErrNotHeld):
		if *jsonOut {
			writeJSON(stdout, struct {
				Key  string `json:"key"`
				Held bool   `json:"held"`
			}{*key, false})
		} else {
			fmt.Fprintf(stdout, "%s: free\n", *key)
		}
		return exitFree
	case err != nil:
		return exitFor(stderr, err)
	}
	if *jsonOut {
		writeJSON(stdout, toJSON(h, now))
	} else {
		fmt.Fprintf(stdout, "%s: held by %s\n", *key, describe(h, now))
	}
	return exitOK
}

// cmdList implements "fence list".
func cmdList(args []string, stdout, stderr io.Writer) int {
	fs, store, jsonOut := newFlags("list", "fence list [--store URL] [--prefix P] [--json]", stderr)
	prefix := fs.String("prefix", "", "show only keys starting with this")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		return exitFor(stderr, usagef("list: unexpected arguments %q", fs.Args()))
	}
	ctx := context.Background()
	client, closeStore, _, err := openStore(ctx, *store)
	if err != nil {
		return exitFor(stderr, err)
	}
	defer closeStore()
	hs, err := client.List(ctx, *prefix)
	if err != nil {
		return exitFor(stderr, err)
	}
	now := time.Now()
	if *jsonOut {
		out := make([]holderJSON, 0, len(hs))
		for _, h := range hs {
			out = append(out, toJSON(h, now))
		}
		writeJSON(stdout, out)
		return exitOK
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tTOKEN\tOWNER\tHOST\tPID\tHELD FOR\tEXPIRES IN")
	for _, h := range hs {
		j := toJSON(h, now)
		held, expires := "-", "until released"
		if j.AcquiredAt != "" {
			held = roundDur(time.Duration(j.HeldForMS) * time.Millisecond)
		}
		if h.ExpiresIn > 0 {
			expires = roundDur(h.ExpiresIn)
		}
		pid := "-"
		if j.PID != 0 {
			pid = fmt.Sprint(j.PID)
		}
		fmt.Fprintf(tw, "%q\t%d\t%s\t%s\t%s\t%s\t%s\n", h.Key, h.Token, h.Owner, j.Host, pid, held, expires)
	}
	tw.Flush()
	return exitOK
}

func writeJSON(w io.Writer, v any) {
	b, _ := json.Marshal(v)
	w.Write(append(b, '\n'))
}
