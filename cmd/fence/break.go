package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/fencing/fence"
)

const breakSynopsis = "fence break [--store URL] --key K (--token N | --force) [--json]"

// cmdBreak implements "fence break": exit 0 if the lease was broken, 3 if
// the key is free, 75 if it is held with another token than --token.
func cmdBreak(args []string, stdout, stderr io.Writer) int {
	fs, store, jsonOut := newFlags("break")
	key := fs.String("key", "", "the lock's key (required)")
	token := fs.Int64("token", 0, "break the lease only if its fencing token is `N` (see fence status)")
	force := fs.Bool("force", false, "without --token: break whatever lease holds the key")
	ev := &events{w: stderr, json: wantsJSON(fs, args)}
	err := parseFlags(fs, breakSynopsis, args, stdout)
	ev.key = *key
	tokenSet := false
	fs.Visit(func(f *flag.Flag) { tokenSet = tokenSet || f.Name == "token" })
	switch {
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case err != nil:
	case *key == "":
		err = usagef("break: --key is required; usage: %s", breakSynopsis)
	case fs.NArg() > 0:
		err = usagef("break: unexpected arguments %q; usage: %s", fs.Args(), breakSynopsis)
	case tokenSet && *force:
		err = usagef("break: --token and --force exclude each other: --token N breaks only the lease with token N, --force whatever lease holds the key")
	case !tokenSet && !*force:
		err = usagef("break: give the holder's --token N (see \"fence status --key %s\"), or --force to break whatever lease holds the key", *key)
	case tokenSet && *token <= 0:
		err = usagef("break: --token %d: fencing tokens are > 0", *token)
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

	opts := []fence.BreakOption{}
	if *force {
		opts = append(opts, fence.BreakAnyHolder())
	}
	bctx, cancel := context.WithTimeout(ctx, storeTimeout)
	h, err := st.client.Break(bctx, *key, *token, opts...)
	cancel()
	now := time.Now()
	type result struct {
		Key    string      `json:"key"`
		Broken bool        `json:"broken"`
		Held   bool        `json:"held"`
		Holder *holderJSON `json:"holder,omitempty"`
	}
	var held *fence.HeldError
	switch {
	case errors.As(err, &held):
		r := result{Key: *key, Held: true}
		text := fmt.Sprintf("%q: held", *key)
		if held.Holder != nil {
			j := toJSON(*held.Holder, now)
			r.Holder = &j
			text += " by " + describe(*held.Holder, now)
		}
		if *jsonOut {
			writeJSON(stdout, r)
		} else {
			fmt.Fprintf(stdout, "%s, not with token %d: nothing broken\n", text, *token)
		}
		return exitHeld
	case errors.Is(err, fence.ErrNotHeld):
		if *jsonOut {
			writeJSON(stdout, result{Key: *key})
		} else {
			fmt.Fprintf(stdout, "%q: free: nothing broken\n", *key)
		}
		return exitFree
	case err != nil && h.Token == 0:
		return ev.fail(st.wrap(err))
	}
	// Broken; err, if any, is the driver's complaint afterwards.
	j := toJSON(h, now)
	if *jsonOut {
		writeJSON(stdout, result{Key: *key, Broken: true, Holder: &j})
	} else {
		fmt.Fprintf(stdout, "%q: broken: it was held by %s; the next holder gets a greater token\n", *key, describe(h, now))
	}
	if err != nil {
		return ev.fail(st.wrap(err))
	}
	return exitOK
}
