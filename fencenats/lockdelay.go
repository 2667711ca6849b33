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

// Lock-delay (fence.WithLockDelay), with per-message TTLs only. A lease
// with a delay is written with a message TTL of its TTL plus the delay,
// rounded up to whole seconds, so that the create by anyone fails (the
// key has a live value) until the server removes the message, which
// writes the marker that wakes waiters. The lease's own end is the
// server's time of the write (the message's timestamp) plus the TTL in
// the value.
//
// A KV write cannot be made conditional on the server's time, only on
// the subject's last revision. So extend, release and resume of such a
// lease write first, expecting the revision, and then read the write's
// timestamp: written before the lease's end, the write is the lease's
// new state; written after it, the lease was in its delay and the write
// would have revived it, so the driver writes the key once more, marked
// ended, with a TTL that keeps it blocked until the old end plus the
// delay, and reports ErrNotHeld. The key never frees sooner than the
// lease's end plus the delay, by the server's clock; a holder that dies
// between the two writes leaves it blocked up to one lease TTL longer.
//
// With a bucket's max age (servers older than 2.11) every message lives
// for the same max age: a key cannot outlive one lease by its own delay,
// and the driver refuses the option.

// SupportsLockDelay implements fence.LockDelayer: the Store keeps the
// lock-delay of locks in a bucket with per-message TTLs.
func (d *Store) SupportsLockDelay(k fence.Kind) bool { return k == fence.KindLock && d.perKey }

// wholeSeconds is d rounded up to whole seconds, at least 1s: a
// per-message TTL.
func wholeSeconds(d time.Duration) time.Duration {
	return max(time.Second, (d+time.Second-1)/time.Second*time.Second)
}

// millis is d in whole milliseconds, rounded up.
func millis(d time.Duration) int64 { return int64((d + time.Millisecond - 1) / time.Millisecond) }

// writtenAt returns the server's time of the message at rev.
func (d *Store) writtenAt(ctx context.Context, rev uint64) (time.Time, error) {
	m, err := d.stream.GetMsg(ctx, rev)
	if err != nil {
		return time.Time{}, err
	}
	return m.Time, nil
}

// acquireDelayed is TryAcquire for a lock with a lock-delay: the create
// with a TTL of the lease's TTL plus its delay, then a read of its time.
func (d *Store) acquireDelayed(ctx context.Context, req fence.Request) (fence.Claim, error) {
	name := d.Name(req.Key)
	v, _ := json.Marshal(value{Key: req.Key, Owner: req.Owner, TTLms: millis(req.TTL), DelayMs: millis(req.LockDelay), Meta: req.Meta})
	rev, err := d.create(ctx, req, name, v, wholeSeconds(req.TTL+req.LockDelay))
	if err != nil {
		return nil, err
	}
	c := &claim{d: d, key: req.Key, name: name, owner: req.Owner, value: v, token: int64(rev), rev: rev, ttl: req.TTL, delay: req.LockDelay}
	at, err := d.writtenAt(ctx, rev)
	if err != nil {
		// The lease's end is unknown: give the key back rather than
		// hold it blind.
		purged := d.kv.Purge(context.WithoutCancel(ctx), name, jetstream.LastRevision(rev), jetstream.PurgeTTL(d.marker))
		return nil, fmt.Errorf("fencenats: acquire %q: read the lease's time: %w", req.Key, errors.Join(err, purged))
	}
	c.end = at.Add(req.TTL)
	return c, nil
}

// delayedValue is the claim's value as an extend of ttl writes it.
func (c *claim) delayedValue(ttl time.Duration) []byte {
	var v value
	_ = json.Unmarshal(c.value, &v)
	v.Token, v.TTLms, v.DelayMs = c.token, millis(ttl), millis(c.delay)
	data, _ := json.Marshal(v)
	return data
}

// extendDelayed writes the lease again with a TTL of ttl plus its
// delay, and keeps the write only if it landed before the lease's end.
func (c *claim) extendDelayed(ctx context.Context, ttl time.Duration) error {
	rev, at, err := c.writeDelayed(ctx, "extend", c.delayedValue(ttl), wholeSeconds(ttl+c.delay))
	if err != nil {
		return err
	}
	if !at.Before(c.end) {
		return c.reblock(ctx, "extend", rev, at)
	}
	c.end = at.Add(ttl)
	return nil
}

// releaseDelayed writes the lease with a TTL of its delay, then purges
// it if that write landed before the lease's end. The first write cuts
// the block short of the lease's end plus its delay only by a release
// made while the lease was live.
func (c *claim) releaseDelayed(ctx context.Context) error {
	rev, at, err := c.writeDelayed(ctx, "release", c.delayedValue(0), wholeSeconds(c.delay))
	if err != nil {
		return err
	}
	if !at.Before(c.end) {
		return c.reblock(ctx, "release", rev, at)
	}
	if err := c.d.kv.Purge(ctx, c.name, jetstream.LastRevision(rev), jetstream.PurgeTTL(c.d.marker)); err != nil {
		return fmt.Errorf("fencenats: release %q: %w", c.key, err)
	}
	return nil
}

// writeDelayed publishes data expecting our last revision and returns
// the new revision and the server's time of it. If someone wrote the
// key since, it is either our own earlier write whose reply was lost,
// which it judges as the write it was, or the lease is gone.
func (c *claim) writeDelayed(ctx context.Context, op string, data []byte, msgTTL time.Duration) (uint64, time.Time, error) {
	for adopted := false; ; adopted = true {
		rev, err := c.d.publish(ctx, c.name, data, c.rev, msgTTL)
		if err == nil {
			at, err := c.d.writtenAt(ctx, rev)
			if err != nil {
				return 0, time.Time{}, fmt.Errorf("fencenats: %s %q: read the write's time: %w", op, c.key, err)
			}
			c.rev = rev
			return rev, at, nil
		}
		if !wrongRevision(err) {
			return 0, time.Time{}, fmt.Errorf("fencenats: %s %q: %w", op, c.key, err)
		}
		if adopted {
			return 0, time.Time{}, fmt.Errorf("%w: %q (token %d) was written by someone else", fence.ErrNotHeld, c.key, c.token)
		}
		m, err := c.d.ours(ctx, c.key, c.name, c.owner, c.token)
		if err != nil {
			return 0, time.Time{}, err
		}
		var v value
		_ = json.Unmarshal(m.Data, &v)
		if v.EndedMs != 0 {
			return 0, time.Time{}, fmt.Errorf("%w: %q (token %d) ended; its lock-delay runs", fence.ErrNotHeld, c.key, c.token)
		}
		c.rev = m.Sequence
		if !m.Time.Before(c.end) {
			return 0, time.Time{}, c.reblock(ctx, op, m.Sequence, m.Time)
		}
		c.end = m.Time.Add(time.Duration(v.TTLms) * time.Millisecond)
	}
}

// ours returns the key's last message if it is a live value of owner's
// lease with token, and an error matching fence.ErrNotHeld otherwise.
func (d *Store) ours(ctx context.Context, key, name, owner string, token int64) (*jetstream.RawStreamMsg, error) {
	m, live, err := d.last(ctx, name)
	switch {
	case err != nil:
		return nil, fmt.Errorf("fencenats: %q: %w", key, err)
	case !live:
		return nil, fmt.Errorf("%w: %q (token %d) was deleted or expired", fence.ErrNotHeld, key, token)
	}
	if h, ok := holder(key, m); !ok || h.Owner != owner || h.Token != token {
		return nil, fmt.Errorf("%w: %q (token %d) now held by %s", fence.ErrNotHeld, key, token, h.Owner)
	}
	return m, nil
}

// reblock follows our write at rev, made at the server's time at, after
// the lease's end: it writes the key once more, marked ended, so that it
// stays blocked until the lease's end plus its delay (at least a whole
// second more than the server's time at, a little past the end), or
// purges it if that time has passed. Either way the lease is lost.
func (c *claim) reblock(ctx context.Context, op string, rev uint64, at time.Time) error {
	lost := fmt.Errorf("%w: %q (token %d) ended in the store at %v, before this %s; its lock-delay runs",
		fence.ErrNotHeld, c.key, c.token, c.end.UTC().Format(time.RFC3339Nano), op)
	left := c.end.Add(c.delay).Sub(at)
	var err error
	if left <= 0 {
		err = c.d.kv.Purge(ctx, c.name, jetstream.LastRevision(rev), jetstream.PurgeTTL(c.d.marker))
	} else {
		var v value
		_ = json.Unmarshal(c.value, &v)
		v.Token, v.TTLms, v.DelayMs, v.EndedMs = c.token, 0, millis(c.delay), c.end.UnixMilli()
		data, _ := json.Marshal(v)
		c.rev, err = c.d.publish(ctx, c.name, data, rev, wholeSeconds(left))
	}
	if err != nil {
		return fmt.Errorf("%w (and putting its block back failed: %w)", lost, err)
	}
	return lost
}
