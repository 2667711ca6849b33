package fencenats

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencing/fence"
)

// claim is one granted lease: the key's value, last written at rev.
type claim struct {
	d     *Store
	key   string
	name  string
	owner string
	value []byte // as created; extends add the token
	token int64
	rev   uint64        // revision of our last write
	ttl   time.Duration // the lease's TTL, as last written
	// With a lock-delay (lockdelay.go): the delay, and the lease's end
	// by the server's clock.
	delay time.Duration
	end   time.Time
}

// Token implements fence.Claim: the create's revision.
func (c *claim) Token() int64 { return c.token }

// Extend implements fence.Claim: it writes the value again, expecting our
// last revision, with a fresh TTL.
func (c *claim) Extend(ctx context.Context, ttl time.Duration) error {
	if c.delay > 0 {
		err := c.extendDelayed(ctx, ttl)
		if err == nil {
			c.ttl = ttl
		}
		return err
	}
	storeTTL, err := c.d.storeTTL(ttl)
	if err != nil {
		return err
	}
	var v value
	_ = json.Unmarshal(c.value, &v)
	v.Token = c.token
	data, _ := json.Marshal(v)
	for adopted := false; ; adopted = true {
		rev, err := c.d.publish(ctx, c.name, data, c.rev, storeTTL)
		if err == nil {
			c.rev, c.ttl = rev, ttl
			return nil
		}
		if !wrongRevision(err) {
			return fmt.Errorf("fencenats: extend %q: %w", c.key, err)
		}
		if adopted {
			return fmt.Errorf("%w: %q (token %d) was written by someone else", fence.ErrNotHeld, c.key, c.token)
		}
		// Someone wrote the key since our last write, or our last write
		// went through though its reply was lost: look.
		if err := c.adopt(ctx); err != nil {
			return err
		}
	}
}

// adopt reads the key and takes its revision as ours if its value still
// names this owner; otherwise the lease is gone.
func (c *claim) adopt(ctx context.Context) error {
	m, live, err := c.d.last(ctx, c.name)
	switch {
	case err != nil:
		return fmt.Errorf("fencenats: %q: %w", c.key, err)
	case !live:
		return fmt.Errorf("%w: %q (token %d) was deleted or expired", fence.ErrNotHeld, c.key, c.token)
	}
	h, ok := holder(c.key, m)
	if !ok || h.Owner != c.owner || h.Token != c.token {
		return fmt.Errorf("%w: %q (token %d) now held by %s", fence.ErrNotHeld, c.key, c.token, h.Owner)
	}
	c.rev = m.Sequence
	return nil
}

// Release implements fence.Claim: it purges the key expecting our last
// revision; the purge marker expires on its own.
//
// Its requests are given up after the lease's TTL (at least a second):
// nats.go waits for a reply across a reconnect, and a request lost with
// its connection or with a stream leader that died would otherwise wait
// for the caller's deadline, however long, though the key expires by its
// TTL anyway.
func (c *claim) Release(ctx context.Context) (err error) {
	ctx, cancel := context.WithTimeoutCause(ctx, max(c.ttl, time.Second), errNoReply)
	defer cancel()
	defer func() {
		if err != nil && context.Cause(ctx) == errNoReply {
			err = fmt.Errorf("%w: the key is freed when its TTL runs out (%w)", errNoReply, err)
		}
	}()
	if c.delay > 0 {
		return c.releaseDelayed(ctx)
	}
	for adopted := false; ; adopted = true {
		opts := []jetstream.KVDeleteOpt{jetstream.LastRevision(c.rev)}
		if c.d.perKey {
			opts = append(opts, jetstream.PurgeTTL(c.d.marker))
		}
		err := c.d.kv.Purge(ctx, c.name, opts...)
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return fmt.Errorf("fencenats: release %q: %w", c.key, err)
		}
		if adopted {
			return fmt.Errorf("%w: %q (token %d) was written by someone else", fence.ErrNotHeld, c.key, c.token)
		}
		if err := c.adopt(ctx); err != nil {
			return err
		}
	}
}
