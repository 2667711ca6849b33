package fenceredis

import (
	"context"
	"errors"
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

// ExtendBatch implements fence.BatchExtender. The claims without a
// lock-delay that share a Redis Cluster hash slot (on a single server or
// a Sentinel's primary, all of them) are extended by one script,
// extendAllScript, which compares and extends each exactly as its Extend
// would and answers for each on its own; a claim with a lock-delay runs
// its own extend script. All of it goes in one pipeline: one round trip
// on a single server; on a Cluster, go-redis sends one per node,
// together. Scripts the server does not have (NOSCRIPT, after a restart
// or SCRIPT FLUSH) are sent again by EVAL, which also loads them, in a
// second pipeline.
func (s *Store) ExtendBatch(ctx context.Context, claims []fence.Claim, ttls []time.Duration) []error {
	errs := make([]error, len(claims))
	calls := s.batchCalls(claims, ttls, errs)
	first := s.evalFirst(extendAllScript) // its first batch sends an EVAL, which loads it
	send := func(retry bool) {
		_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range calls {
				bc := &calls[i]
				switch {
				case !retry:
					bc.send(ctx, p, bc.script == nil && first)
				case noScript(bc.cmd.Err()):
					bc.send(ctx, p, true)
				}
			}
			return nil
		})
	}
	send(false)
	for i := range calls {
		if noScript(calls[i].cmd.Err()) {
			send(true)
			break
		}
	}
	for i := range calls {
		if calls[i].script == nil && calls[i].cmd.Err() == nil {
			s.loaded(extendAllScript)
			break
		}
	}
	for _, bc := range calls {
		if bc.script != nil {
			i := bc.members[0]
			errs[i] = claims[i].(*claim).extended(bc.cmd.Int())
			continue
		}
		replies, err := bc.cmd.Slice()
		if err == nil && len(replies) != len(bc.members) {
			err = fmt.Errorf("%d replies for %d locks", len(replies), len(bc.members))
		}
		for j, i := range bc.members {
			c := claims[i].(*claim)
			if err != nil {
				errs[i] = c.extended(0, err)
				continue
			}
			switch r := replies[j].(type) {
			case int64:
				errs[i] = c.extended(int(r), nil)
			case string:
				errs[i] = c.extended(0, errors.New(r))
			default:
				errs[i] = c.extended(0, fmt.Errorf("unexpected reply %v (%T)", r, r))
			}
		}
	}
	return errs
}

// batchCall is one script of an ExtendBatch, and its reply once sent:
// either extendAllScript for members, as the whole EVALSHA command in
// args, or (script set) another script for members[0] alone.
type batchCall struct {
	members []int
	args    []any
	script  *redis.Script
	keys    []string
	cmd     *redis.Cmd
}

func (bc *batchCall) send(ctx context.Context, p redis.Pipeliner, eval bool) {
	switch {
	case bc.script != nil && eval:
		bc.cmd = bc.script.Eval(ctx, p, bc.keys, bc.args...)
	case bc.script != nil:
		bc.cmd = bc.script.EvalSha(ctx, p, bc.keys, bc.args...)
	default:
		bc.cmd = extendAllScript.cmd(ctx, bc.args, eval)
		_ = p.Process(ctx, bc.cmd)
	}
}

// batchCalls groups claims into the scripts that extend them: one
// extendAllScript per hash slot (one in all but on a Cluster) and one
// script for each claim with a lock-delay. A claim of another driver gets
// its error in errs and no call.
//
// The EVALSHA of extendAllScript is built here (hotScript): a claim's
// names and value are put in interfaces at its first batch and kept, and
// the TTLs are the Store's (boxedTTL).
func (s *Store) batchCalls(claims []fence.Claim, ttls []time.Duration, errs []error) []batchCall {
	_, cluster := s.rdb.(*redis.ClusterClient)
	var calls []batchCall
	groups := make(map[uint16]int) // slot (0 off a Cluster) -> its extendAllScript in calls
	for i, c := range claims {
		rc, ok := c.(*claim)
		if !ok || rc.s != s {
			errs[i] = fmt.Errorf("fenceredis: ExtendBatch of a claim of another driver (%T)", c)
			continue
		}
		if rc.delay > 0 {
			script, keys, args := rc.extendCall(ttls[i])
			calls = append(calls, batchCall{script: script, keys: keys, args: args, members: []int{i}})
			continue
		}
		var slot uint16
		if cluster {
			slot = crc16(hashed(rc.n.lock)) % 16384
		}
		g, ok := groups[slot]
		if !ok {
			g = len(calls)
			groups[slot] = g
			calls = append(calls, batchCall{})
		}
		calls[g].members = append(calls[g].members, i)
	}
	for g := range calls {
		bc := &calls[g]
		if bc.script != nil {
			continue
		}
		n := len(bc.members)
		keys, argv := 3, 3+2*n
		bc.args = extendAllScript.call(2*n, 5*n)[:3+5*n]
		for _, i := range bc.members {
			c := claims[i].(*claim)
			if c.boxed == nil {
				c.boxed = &[3]any{c.n.lock, c.n.counter, c.value}
			}
			ttl := s.boxedTTL(ttls[i])
			bc.args[keys], bc.args[keys+1] = c.boxed[0], c.boxed[1]
			bc.args[argv], bc.args[argv+1], bc.args[argv+2] = c.boxed[2], ttl[0], ttl[1]
			keys, argv = keys+2, argv+3
		}
	}
	return calls
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
