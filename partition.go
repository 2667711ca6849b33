package fence

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Partitions shares named partitions of work among the workers of a group,
// each partition owned through its own lease and token — "partition the
// work so no lock is needed". Every worker runs Run; together they own
// every partition, each worker a fair share (within one of P/W), and a
// partition's work runs on exactly one worker at a time as a resource
// guarded by the partition lease's token sees it.
//
// Membership is a lease too: a worker holds one of P member slots while it
// runs. Each round (every renew interval) a worker counts the live members,
// works out its share from its rank among them, gives up partitions it has
// beyond its share (stopping their work first) and takes free partitions up
// to its share. A joining worker therefore gets its share within a few
// rounds, as over-loaded workers give partitions up of their own accord (a
// cooperative steal: no partition is ever taken from a live owner); a
// leaving worker releases its partitions; a dead worker's leases expire and
// its partitions move to the others. Partitions needs a store that can
// Inspect.
type Partitions struct {
	c     *Client
	group string
	names []string
	opts  []AcquireOption

	mu    sync.Mutex
	owned map[string]*ownedPartition
}

type ownedPartition struct {
	lease *Lease
	stop  context.CancelFunc
	done  chan struct{}
}

// Partitions returns the partitioning of names among the workers of group.
// The options apply to every lease; WithOwner names the worker (a random
// name otherwise). Partitions never wait for a key: Run refuses WithWait
// (ErrInvalidOption).
func (c *Client) Partitions(group string, names []string, opts ...AcquireOption) *Partitions {
	return &Partitions{c: c, group: group, names: slices.Clone(names), opts: opts}
}

// Owned returns the partitions this worker owns now, sorted.
func (p *Partitions) Owned() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var names []string
	for name := range p.owned {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

// Run joins the group and owns a fair share of the partitions until ctx
// ends. For each partition it gains it calls work in a new goroutine, with
// the partition's lease (send its Token with every write) and a context
// that ends when the worker must stop: the lease was lost, the partition is
// being handed to another worker, or ctx ended. A partition's lease is
// released only after its work has returned, so nobody else starts it
// before this worker has stopped. If work returns early, the partition is
// released and may be taken again.
//
// Run returns once every work call has returned and every lease has been
// released: nil when ctx ended, or the error that stopped it. A join that
// fails because the store is unavailable (ErrUnavailable), or answered
// only after the member lease's validity had ended, is logged as a warning
// and tried again next round; any other error stops Run.
//
// A partition lost, like any lease, is reported as every partition's work
// failure is, through the worker's logger and metrics (Run goes on: the
// partition is free for the group again). Lost while its work runs, the
// work's context ends with the *LostError as its cause, and fence logs
// the loss ("fence: lease lost", at error level) and counts it
// (fence.losses). Found only when the partition is released after its
// work returned (the store no longer held it), the loss is logged and
// counted the same way, with found_by=release. A release that fails for
// another reason is logged as a warning.
func (p *Partitions) Run(ctx context.Context, work func(ctx context.Context, partition string, l *Lease) error) error {
	if len(p.names) == 0 {
		return fmt.Errorf("%w: partitions of %q: no partition names", ErrInvalidOption, p.group)
	}
	if len(p.names) != len(slices.Compact(slices.Sorted(slices.Values(p.names)))) {
		return fmt.Errorf("%w: partitions of %q: duplicate partition names", ErrInvalidOption, p.group)
	}
	in, ok := p.c.drv.(Inspector)
	if !ok {
		return fmt.Errorf("%w: partitions of %q need a store that can inspect keys", ErrUnsupported, p.group)
	}
	cfg := refuse(with(p.c.cfg, p.opts), p.opts, "WithWait", "Partitions", "never waits")
	if cfg.ownerPrefix == "" {
		cfg = with(cfg, []Option{WithOwner("w" + newOwnerID("")[:12])})
	}
	if err := cfg.validate(p.memberKey(0)); err != nil {
		return err
	}
	p.mu.Lock()
	p.owned = make(map[string]*ownedPartition)
	p.mu.Unlock()
	defer p.releaseAll()

	var member *Lease
	defer func() {
		if member != nil {
			p.release(ctx, member)
		}
	}()
	tick := time.NewTicker(cfg.renewInterval())
	defer tick.Stop()
	for {
		if member == nil || member.Err() != nil {
			if member != nil {
				// Lost (for example, renewals too slow): let the store
				// forget it (compare-and-delete) before joining again.
				p.release(ctx, member)
			}
			var err error
			if member, err = p.join(ctx, cfg); err != nil && ctx.Err() == nil {
				if !passing(err) {
					return err
				}
				cfg.logger.Warn("fence: partitions: join failed; retrying next round", "group", p.group, "err", err)
			}
		}
		if member != nil && member.Err() == nil {
			if err := p.rebalance(ctx, cfg, in, member, work); err != nil && ctx.Err() == nil {
				cfg.logger.Warn("fence: partitions: rebalance failed; retrying next round", "group", p.group, "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (p *Partitions) memberKey(slot int) string {
	return p.group + "/members/" + strconv.Itoa(slot)
}

func (p *Partitions) partitionKey(name string) string {
	return p.group + "/partitions/" + name
}

// join takes the first free member slot; nil if all are taken (more
// workers than partitions: this one has nothing to do for now).
func (p *Partitions) join(ctx context.Context, cfg *config) (*Lease, error) {
	for slot := range p.names {
		l, err := p.c.acquire(ctx, target{key: p.memberKey(slot)}, cfg, false)
		if err == nil {
			return l, nil
		}
		if !errors.Is(err, ErrHeld) {
			return nil, err
		}
	}
	return nil, nil
}

// passing reports whether a failed try may succeed if made again: the
// store was unavailable, or its grant came back too late to be held (a
// slow store; the grant has been released).
func passing(err error) bool {
	return errors.Is(err, ErrUnavailable) || errors.Is(err, errLateReply)
}

// memberOf returns the worker name in an owner id: the prefix before the
// random part.
func memberOf(owner string) string {
	if i := strings.LastIndexByte(owner, '-'); i > 0 {
		return owner[:i]
	}
	return owner
}

// rebalance is one round: count members, work out this worker's share,
// give up or take partitions to meet it.
func (p *Partitions) rebalance(ctx context.Context, cfg *config, in Inspector, member *Lease, work func(context.Context, string, *Lease) error) error {
	var members []string
	for slot := range p.names {
		h, err := in.Inspect(ctx, p.memberKey(slot))
		if errors.Is(err, ErrNotHeld) {
			continue
		}
		if err != nil {
			return err
		}
		members = append(members, memberOf(h.Owner))
	}
	me := cfg.ownerPrefix
	if !slices.Contains(members, me) {
		members = append(members, me)
	}
	slices.Sort(members)
	members = slices.Compact(members)
	rank := slices.Index(members, me)
	share := len(p.names) / len(members)
	if rank < len(p.names)%len(members) {
		share++
	}

	p.reap()
	owned := p.Owned()
	for len(owned) > share {
		// Give up the last ones, stopping their work first.
		name := owned[len(owned)-1]
		owned = owned[:len(owned)-1]
		p.drop(ctx, name)
	}
	if len(owned) == share {
		return nil
	}
	// Take free partitions, starting at a point that depends on the rank so
	// that workers do not all race for the same ones.
	start := rank * len(p.names) / len(members)
	for i := range p.names {
		if len(owned) >= share || ctx.Err() != nil || member.Err() != nil {
			break
		}
		name := p.names[(start+i)%len(p.names)]
		if slices.Contains(owned, name) {
			continue
		}
		l, err := p.c.acquire(ctx, target{key: p.partitionKey(name)}, cfg, false)
		if errors.Is(err, ErrHeld) {
			continue
		}
		if err != nil {
			return err
		}
		p.start(ctx, name, l, work)
		owned = append(owned, name)
	}
	return nil
}

// start runs work on a newly owned partition.
func (p *Partitions) start(ctx context.Context, name string, l *Lease, work func(context.Context, string, *Lease) error) {
	wctx, stop := context.WithCancelCause(l.Context())
	unlink := context.AfterFunc(ctx, func() { stop(context.Cause(ctx)) })
	op := &ownedPartition{lease: l, stop: func() { stop(errHandedOver) }, done: make(chan struct{})}
	p.mu.Lock()
	p.owned[name] = op
	p.mu.Unlock()
	go func() {
		defer close(op.done)
		defer unlink()
		if err := work(wctx, name, l); err != nil && wctx.Err() == nil {
			l.cfg.logger.Warn("fence: partition work failed; releasing the partition", "group", p.group, "partition", name, "err", err)
		}
	}()
}

var errHandedOver = errors.New("fence: partition handed over to another worker")

// reap forgets partitions whose work returned or whose lease was lost,
// releasing their leases.
func (p *Partitions) reap() {
	p.mu.Lock()
	var gone []string
	for name, op := range p.owned {
		select {
		case <-op.done:
			gone = append(gone, name)
		default:
			if op.lease.Err() != nil {
				gone = append(gone, name)
			}
		}
	}
	p.mu.Unlock()
	for _, name := range gone {
		p.drop(context.Background(), name)
	}
}

// drop stops a partition's work, waits for it, then releases its lease.
func (p *Partitions) drop(ctx context.Context, name string) {
	p.mu.Lock()
	op := p.owned[name]
	delete(p.owned, name)
	p.mu.Unlock()
	if op == nil {
		return
	}
	op.stop()
	<-op.done
	p.release(ctx, op.lease)
}

func (p *Partitions) releaseAll() {
	for _, name := range p.Owned() {
		p.drop(context.Background(), name)
	}
}

// release releases a partition's or the membership's lease. A loss,
// whether found before or by this release, was logged by the lease.
func (p *Partitions) release(ctx context.Context, l *Lease) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.TTL())
	defer cancel()
	if err := l.Release(rctx); err != nil && !errors.Is(err, ErrLost) && !errors.Is(err, ErrReleased) {
		l.cfg.logger.Warn("fence: partitions: release failed; the store frees the key at the end of its TTL",
			"group", p.group, "key", l.key, "token", l.token, "err", err)
	}
}
