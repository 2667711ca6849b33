package fenceetcd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence"
)

var _ fence.Resumer = (*Store)(nil)

// Resume implements fence.Resumer. It reads key's holder entry and, if
// its owner is req.Owner and its token is token, binds it to
// this driver's session for req.TTL in one transaction that compares the
// entry's create and mod revisions (so it is still exactly the entry that
// was read, owner included). A put to an existing key keeps its create
// revision: the token stays; the value takes req.Meta.
//
// The entry moves to this process's session rather than keeping the dead
// process's etcd lease alive: that lease may hold other keys of the dead
// process, which would then stay held for as long as the resumed lease
// lives; they expire with it as they would have. The session is granted
// for req.TTL like any acquisition's, so no TTL granted to the dead
// process limits the resumed lease.
func (d *Store) Resume(ctx context.Context, req fence.Request, token int64) (fence.Claim, error) {
	if req.Kind != fence.KindLock {
		return nil, fmt.Errorf("fenceetcd: resume %q: %w: %s", req.Key, fence.ErrUnsupported, req.Kind)
	}
	c, err := d.resume(ctx, req, token)
	if errors.Is(err, errSessionGone) {
		c, err = d.resume(ctx, req, token) // once more, on a new session
	}
	return c, markUnavailable(ctx, err)
}

// afterResumeRead, if set (by tests), runs between the read of the holder
// entry and the transaction that takes it.
var afterResumeRead func(name string)

// errResumeRaced: the holder entry changed between the read and the
// transaction, again and again.
var errResumeRaced = errors.New("fenceetcd: holder entry kept changing during the resume")

func (d *Store) resume(ctx context.Context, req fence.Request, token int64) (fence.Claim, error) {
	s, err := d.session(ctx, req.TTL)
	if err != nil {
		return nil, fmt.Errorf("fenceetcd: resume %q: %w", req.Key, err)
	}
	val := encodeEntry(req)
	delay := d.delayName(req.Key)
	for range 3 {
		resp, err := d.cli.Txn(ctx).
			Then(clientv3.OpGet(d.dir(req.Key), clientv3.WithFirstCreate()...), clientv3.OpGet(delay), d.epochGet()).
			Commit()
		if err != nil {
			return nil, fmt.Errorf("fenceetcd: resume %q: %w", req.Key, err)
		}
		kvs, lost := rangeOf(resp, 0), rangeOf(resp, 1)
		base, err := d.baseFor(ctx, resp)
		if err != nil {
			return nil, fmt.Errorf("fenceetcd: resume %q: %w", req.Key, err)
		}
		h, ok := holder(req.Key, kvs, base)
		switch {
		case !ok && len(lost) > 0:
			return nil, inDelay(req.Key, lostHolder(req.Key, lost[0], base))
		case !ok:
			return nil, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, req.Key)
		case h.Token != token || h.Owner != req.Owner:
			return nil, &fence.HeldError{Key: req.Key, Holder: &h}
		}
		kv := kvs[0]
		name := string(kv.Key)
		if afterResumeRead != nil {
			afterResumeRead(name)
		}
		rev := kv.CreateRevision
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(name), "=", rev),
			clientv3.Compare(clientv3.ModRevision(name), "=", kv.ModRevision)}
		puts := []clientv3.Op{clientv3.OpPut(name, val, clientv3.WithLease(s.id))}
		// The holder's lock-delay entry moves to a delay lease of this
		// session: the dead process's is no longer kept alive.
		dl, err := d.moveDelay(ctx, s, req.Key, lost)
		if err != nil {
			return nil, fmt.Errorf("fenceetcd: resume %q: %w", req.Key, err)
		}
		if dl != nil {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(delay), "=", lost[0].ModRevision))
			puts = append(puts, clientv3.OpPut(delay, dl.val, clientv3.WithLease(dl.id)))
		}
		tx, err := d.cli.Txn(ctx).If(cmps...).Then(puts...).Commit()
		if err != nil {
			// The put may have been applied: the entry would then live
			// with this session, which no claim releases.
			d.unresume(s, name, rev)
			d.revokeDelay(dl)
			return nil, d.opError("resume", req.Key, err, s)
		}
		if tx.Succeeded {
			q := queue{dir: d.dir(req.Key), prefix: d.dir(req.Key), slot: -1, name: name, val: val}
			c := d.newClaim(s, req.Key, q, rev, base)
			c.keepDelay(dl, delay)
			if dl != nil {
				d.revokeDelay(&delayLease{id: clientv3.LeaseID(lost[0].Lease)})
			}
			return c, nil
		}
		d.revokeDelay(dl)
		// Released, expired, or changed since it was read: look again.
	}
	return nil, fmt.Errorf("fenceetcd: resume %q: %w", req.Key, errResumeRaced)
}

// moveDelay grants, for a resume on session s, the new lease of the
// holder's lock-delay entry lost (none if empty), with the entry's value
// unchanged, so that the lost holder's token and delay stay.
func (d *Store) moveDelay(ctx context.Context, s *session, key string, lost []*mvccpb.KeyValue) (*delayLease, error) {
	if len(lost) == 0 {
		return nil, nil
	}
	var e delayEntry
	if err := json.Unmarshal(lost[0].Value, &e); err != nil {
		return nil, fmt.Errorf("lock-delay entry of %q: %w", key, err)
	}
	resp, err := d.cli.Grant(ctx, wholeSeconds(s.ttl)+wholeSeconds(e.Delay))
	if err != nil {
		return nil, fmt.Errorf("grant lock-delay lease: %w", err)
	}
	return &delayLease{id: resp.ID, val: string(lost[0].Value), delay: e.Delay}, nil
}

// unresume deletes the entry name, created at rev, if a resume whose
// outcome is unknown bound it to session s. If etcd cannot be reached,
// s stops being kept alive, so that the entry expires with it.
func (d *Store) unresume(s *session, name string, rev int64) {
	ctx, cancel := context.WithTimeout(d.ctx, s.ttl)
	defer cancel()
	_, err := d.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(name), "=", rev),
			clientv3.Compare(clientv3.LeaseValue(name), "=", s.id)).
		Then(clientv3.OpDelete(name)).
		Commit()
	if err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		s.end(fmt.Errorf("fenceetcd: could not delete resumed entry %s: %w", name, err))
	}
}
