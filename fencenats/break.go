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

var (
	_ fence.Breaker = (*Store)(nil)
	_ fence.Resumer = (*Store)(nil)
)

// Break implements fence.Breaker: it reads key's value and, if it holds
// the lease with token (any, for 0), purges the key expecting the
// revision read, as a release does: a write since (the holder's extend,
// a new holder) makes the purge fail, and Break looks again. The
// stream's sequence only grows, so the next token is greater.
func (d *Store) Break(ctx context.Context, key string, token int64) (fence.Holder, error) {
	name := d.Name(key)
	for attempt := 0; ; attempt++ {
		m, live, err := d.last(ctx, name)
		if err != nil {
			return fence.Holder{}, fmt.Errorf("fencenats: break %q: %w", key, err)
		}
		if !live {
			return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
		}
		h, ok := holder(key, m)
		switch {
		case !ok:
			return fence.Holder{}, fmt.Errorf("fencenats: break %q: unreadable value at revision %d", key, m.Sequence)
		case token != 0 && h.Token != token:
			return fence.Holder{}, &fence.HeldError{Key: key, Holder: &h}
		}
		opts := []jetstream.KVDeleteOpt{jetstream.LastRevision(m.Sequence)}
		if d.perKey {
			opts = append(opts, jetstream.PurgeTTL(d.marker))
		}
		err = d.kv.Purge(ctx, name, opts...)
		if err == nil {
			return h, nil
		}
		if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) || attempt == 5 {
			return fence.Holder{}, fmt.Errorf("fencenats: break %q: %w", key, err)
		}
	}
}

// Resume implements fence.Resumer: it reads key's value and, if it names
// req.Owner with token, writes it again (new metadata, new TTL and
// lock-delay) expecting the revision read, as an extend does. A lease
// with a lock-delay is judged as its extends are (lockdelay.go): resumed
// only if the write landed before its end.
func (d *Store) Resume(ctx context.Context, req fence.Request, token int64) (fence.Claim, error) {
	return d.acquisition(ctx, req, func(ctx context.Context) (fence.Claim, error) { return d.resume(ctx, req, token) })
}

func (d *Store) resume(ctx context.Context, req fence.Request, token int64) (fence.Claim, error) {
	if req.Kind != fence.KindLock {
		return nil, fmt.Errorf("fencenats: resume %q: %w: %s", req.Key, fence.ErrUnsupported, req.Kind)
	}
	ttl, err := d.storeTTL(req.TTL)
	if err != nil {
		return nil, err
	}
	msgTTL := ttl
	created := value{Key: req.Key, Owner: req.Owner, TTLms: ttl.Milliseconds(), Meta: req.Meta}
	if req.LockDelay > 0 {
		msgTTL = wholeSeconds(req.TTL + req.LockDelay)
		created.TTLms, created.DelayMs = millis(req.TTL), millis(req.LockDelay)
	}
	name := d.Name(req.Key)
	for attempt := 0; ; attempt++ {
		m, live, err := d.last(ctx, name)
		if err != nil {
			return nil, fmt.Errorf("fencenats: resume %q: %w", req.Key, err)
		}
		if !live {
			return nil, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, req.Key)
		}
		h, ok := holder(req.Key, m)
		if !ok || h.Owner != req.Owner || h.Token != token {
			return nil, &fence.HeldError{Key: req.Key, Holder: &h}
		}
		var old value
		_ = json.Unmarshal(m.Data, &old)
		if old.EndedMs != 0 {
			return nil, fmt.Errorf("%w: %q (token %d) expired; its lock-delay runs", fence.ErrNotHeld, req.Key, token)
		}
		v := created
		v.Token = token
		data, _ := json.Marshal(v)
		rev, err := d.publish(ctx, name, data, m.Sequence, msgTTL)
		if err != nil {
			if !wrongRevision(err) || attempt == 5 {
				return nil, fmt.Errorf("fencenats: resume %q: %w", req.Key, err)
			}
			continue
		}
		first, _ := json.Marshal(created)
		c := &claim{d: d, key: req.Key, name: name, owner: req.Owner, value: first, token: token, rev: rev, ttl: req.TTL, delay: req.LockDelay}
		if old.DelayMs == 0 && req.LockDelay == 0 {
			return c, nil
		}
		at, err := d.writtenAt(ctx, rev)
		if err != nil {
			return nil, fmt.Errorf("fencenats: resume %q: read the write's time: %w", req.Key, err)
		}
		if old.DelayMs > 0 {
			// Judged by the old lease's end and delay.
			old := &claim{d: d, key: req.Key, name: name, owner: req.Owner, value: m.Data, token: token, rev: rev, ttl: req.TTL,
				delay: time.Duration(old.DelayMs) * time.Millisecond, end: m.Time.Add(time.Duration(old.TTLms) * time.Millisecond)}
			if !at.Before(old.end) {
				return nil, old.reblock(ctx, "resume", rev, at)
			}
		}
		c.end = at.Add(req.TTL)
		return c, nil
	}
}
