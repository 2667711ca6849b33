package fenceredis

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fencing/fence"
)

var _ fence.BatchExtender = (*Store)(nil)

// Batchable implements fence.BatchExtender: the Store extends its locks'
// claims in batches, with or without a lock-delay.
func (s *Store) Batchable(c fence.Claim) bool {
	rc, ok := c.(*claim)
	return ok && rc.s == s
}

// ExtendBatch implements fence.BatchExtender: one pipeline of the extend
// scripts (EVALSHA), each claim's own compare-and-extend exactly as its
// Extend runs it, lock-delay included. A pipeline is one round trip on a
// single server; on a Cluster, go-redis sends one per node, together.
// Scripts the server does not have (NOSCRIPT, after a restart or SCRIPT
// FLUSH) are sent again by EVAL, which also loads them, in a second
// pipeline.
func (s *Store) ExtendBatch(ctx context.Context, claims []fence.Claim, ttls []time.Duration) []error {
	errs := make([]error, len(claims))
	cmds := make([]*redis.Cmd, len(claims))
	cs := make([]*claim, len(claims))
	for i, c := range claims {
		rc, ok := c.(*claim)
		if !ok || rc.s != s {
			errs[i] = fmt.Errorf("fenceredis: ExtendBatch of a claim of another driver (%T)", c)
			continue
		}
		cs[i] = rc
	}
	send := func(eval bool) {
		_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, c := range cs {
				if c == nil || (eval && !noScript(cmds[i].Err())) {
					continue
				}
				script, keys, args := c.extendCall(ttls[i])
				if eval {
					cmds[i] = script.Eval(ctx, p, keys, args...)
				} else {
					cmds[i] = script.EvalSha(ctx, p, keys, args...)
				}
			}
			return nil
		})
	}
	send(false)
	missing := false
	for i, c := range cs {
		if c != nil && noScript(cmds[i].Err()) {
			missing = true
		}
	}
	if missing {
		send(true)
	}
	for i, c := range cs {
		if c == nil {
			continue
		}
		errs[i] = c.extended(cmds[i].Int())
	}
	return errs
}

// extended is the outcome of the claim's extend script, which answered
// ok (1 if extended) or failed with err.
func (c *claim) extended(ok int, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("fenceredis: extend %q: %w", c.key, err)
	case ok != 1:
		return fmt.Errorf("%w: %q is no longer held by %s", fence.ErrNotHeld, c.key, ownerOf(c.value))
	}
	return nil
}

// extendCall is the script, keys and arguments of the claim's extension
// by ttl, alone (Extend) or in a batch (ExtendBatch): compare-and-PEXPIRE,
// or for a lease with a lock-delay extendDelayedScript, which also moves
// the lease's end and refuses once it has passed.
func (c *claim) extendCall(ttl time.Duration) (*redis.Script, []string, []any) {
	if c.delay > 0 {
		return extendDelayedScript, []string{c.n.lock, c.n.counter, c.until},
			[]any{c.value, ms(ttl), ms(ttl + c.delay), ms(ttl + c.delay + c.s.retention)}
	}
	return extendScript, c.keys, []any{c.value, ms(ttl), ms(ttl + c.s.retention)}
}

func noScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
