package fenceetcd

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence"
)

var _ fence.MultiAcquirer = (*Store)(nil)

// TryAcquireAll implements fence.MultiAcquirer with one transaction:
// if no key has an entry ahead (TryAcquire's compare, for every key), it
// puts every entry under the session; else it puts none and reads each
// key's first entry, to name the holder of the first held key. Every
// entry is created at the transaction's revision, which (plus the token
// epoch's base, read in the same transaction) is each lease's token:
// greater than every revision before it.
func (d *Store) TryAcquireAll(ctx context.Context, reqs []fence.Request) ([]fence.Claim, error) {
	cs, err := d.tryAcquireAll(ctx, reqs)
	if errors.Is(err, errSessionGone) {
		cs, err = d.tryAcquireAll(ctx, reqs) // once more, on a new session
	}
	return cs, markUnavailable(ctx, err)
}

func (d *Store) tryAcquireAll(ctx context.Context, reqs []fence.Request) ([]fence.Claim, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	for _, req := range reqs {
		if req.Kind != fence.KindLock || req.TTL != reqs[0].TTL {
			return nil, fmt.Errorf("fenceetcd: acquire all: %w: requests of other kinds or TTLs", fence.ErrUnsupported)
		}
	}
	s, err := d.session(ctx, reqs[0].TTL)
	if err != nil {
		return nil, fmt.Errorf("fenceetcd: acquire all: %w", err)
	}
	qs := make([]queue, len(reqs))
	dls := make([]*delayLease, len(reqs))
	var (
		cmps  []clientv3.Cmp
		puts  []clientv3.Op
		reads []clientv3.Op
		delay []clientv3.Op
	)
	revokeDelays := func() {
		for _, dl := range dls {
			d.revokeDelay(dl)
		}
	}
	for i, req := range reqs {
		q := d.queueOf(s, req)
		qs[i] = q
		if dls[i], err = d.grantDelay(ctx, s, req, 0); err != nil {
			for _, q := range qs[:i+1] {
				s.freeSlot(q.prefix, q.slot)
			}
			revokeDelays()
			return nil, fmt.Errorf("fenceetcd: acquire all: %w", err)
		}
		cmps = append(append(cmps, clientv3.Compare(clientv3.CreateRevision(q.ahead), "=", 0).WithPrefix()), delayFree(q)...)
		puts = append(append(puts, clientv3.OpPut(q.name, q.val, clientv3.WithLease(s.id))), delayPut(q, dls[i])...)
		reads = append(reads, clientv3.OpGet(q.dir, clientv3.WithFirstCreate()...))
		delay = append(delay, delayGet(q)...)
	}
	resp, err := d.cli.Txn(ctx).If(cmps...).Then(append(puts, d.epochGet())...).Else(append(append(reads, delay...), d.epochGet())...).Commit()
	if err != nil {
		// The puts may have been applied though the reply was lost.
		for _, q := range qs {
			d.abandon(s, q, s)
		}
		revokeDelays()
		return nil, d.opError("acquire all", reqs[0].Key, err, s)
	}
	base, err := d.baseIn(ctx, resp)
	if !resp.Succeeded {
		for _, q := range qs {
			s.freeSlot(q.prefix, q.slot) // nothing was put
		}
		revokeDelays()
		if err != nil {
			return nil, fmt.Errorf("fenceetcd: acquire all: %w", err)
		}
		for i, req := range reqs {
			first, lost := rangeOf(resp, i), rangeOf(resp, len(reqs)+i)
			if len(first) > 0 || len(lost) > 0 {
				return nil, heldBy(req.Key, first, lost, base)
			}
		}
		// Every entry ahead went between the compare and the reads:
		// held all the same when the transaction ran.
		return nil, &fence.HeldError{Key: reqs[0].Key}
	}
	if err != nil {
		for _, q := range qs {
			d.abandon(s, q, s)
		}
		revokeDelays()
		return nil, fmt.Errorf("fenceetcd: acquire all: %w", err)
	}
	claims := make([]fence.Claim, len(reqs))
	for i, req := range reqs {
		c := d.newClaim(s, req.Key, qs[i], resp.Header.Revision, base)
		c.keepDelay(dls[i], qs[i].delay)
		claims[i] = c
	}
	return claims, nil
}
