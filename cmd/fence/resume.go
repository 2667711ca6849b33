package main

import (
	"fmt"
	"os"
	"strconv"
)

// resumeFlags is "fence run --resume": the lease to take back, from the
// environment that an earlier "fence run" gave its command.
type resumeFlags struct {
	on    bool
	owner string
	token int64
}

// read reads FENCE_OWNER and FENCE_TOKEN (and checks FENCE_KEY, if set,
// against key). waits says whether --wait or --no-wait was given too.
func (r *resumeFlags) read(key string, waits bool) error {
	if waits {
		return usagef("run: --resume makes one attempt and never waits: drop --wait and --no-wait")
	}
	r.owner = os.Getenv("FENCE_OWNER")
	tok := os.Getenv("FENCE_TOKEN")
	if r.owner == "" || tok == "" {
		return usagef("run: --resume needs FENCE_OWNER and FENCE_TOKEN in the environment: the owner and token of the lease to take back, as fence run gave them to its command")
	}
	var err error
	if r.token, err = strconv.ParseInt(tok, 10, 64); err != nil || r.token <= 0 {
		return usagef("run: --resume: FENCE_TOKEN=%q is not a fencing token (an integer > 0)", tok)
	}
	if k := os.Getenv("FENCE_KEY"); k != "" && k != key {
		return usagef("run: --resume: FENCE_KEY=%q names another key than --key %q", k, key)
	}
	return nil
}

// gone reports a lease that --resume found no longer held, and returns
// the exit status of a lost lease.
func (r *resumeFlags) gone(key string, ev *events) int {
	ev.emit(event{Event: "lost", Token: r.token, Owner: r.owner, Reason: "not held",
		Message: fmt.Sprintf("the lease on %q with token %d is no longer held (it expired or was released); not running the command. Acquire it anew, without --resume", key, r.token)}, true)
	return exitLost
}
