package fenceetcd_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceetcd"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// deadHolder puts, as a process that then died would have left it, an
// entry for each of keys under one etcd lease that no one keeps alive,
// and returns the lease and the entries' tokens.
func deadHolder(t *testing.T, ctx context.Context, cli *clientv3.Client, d *fenceetcd.Store, owner string, keys ...string) (clientv3.LeaseID, []int64) {
	t.Helper()
	g, err := cli.Grant(ctx, 60)
	if err != nil {
		t.Fatalf("Grant: %v", err)
	}
	var toks []int64
	for _, key := range keys {
		name := d.Dir(key) + strconv.FormatInt(int64(g.ID), 16) + ".0"
		put, err := cli.Put(ctx, name, `{"owner":"`+owner+`"}`, clientv3.WithLease(g.ID))
		if err != nil {
			t.Fatalf("Put %s: %v", name, err)
		}
		tok, err := d.TokenOf(ctx, put.Header.Revision)
		if err != nil {
			t.Fatalf("TokenOf: %v", err)
		}
		toks = append(toks, tok)
	}
	return g.ID, toks
}

func resumeSetup(t *testing.T) (context.Context, *clientv3.Client, *fenceetcd.Store, *fence.Client) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cli := newClient(t, testserver.Etcd(t).Endpoints())
	d := fenceetcd.New(cli)
	t.Cleanup(func() { d.Close() })
	return ctx, cli, d, fence.New(d)
}

// The resumed entry moves to the new process's session: the dead
// process's etcd lease ending (revoked here, as its expiry would) takes
// its other keys with it, not the resumed one. Shown to fail by binding
// the resumed entry to its old lease (kv.Lease) instead of the session:
// the resumed key is then freed by the revoke.
func TestResumeLeavesTheDeadLease(t *testing.T) {
	ctx, cli, _, c := resumeSetup(t)
	d := c.Driver().(*fenceetcd.Store)
	const owner = "dead-owner"
	old, toks := deadHolder(t, ctx, cli, d, owner, "k", "other")

	l, err := c.TryAcquire(ctx, "k", fence.WithResume(owner, toks[0]), fence.WithTTL(ttl))
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	if l.Token() != toks[0] {
		t.Fatalf("resumed token %d; want %d", l.Token(), toks[0])
	}
	if _, err := cli.Revoke(ctx, old); err != nil {
		t.Fatalf("Revoke of the dead process's lease: %v", err)
	}
	if _, err := c.Inspect(ctx, "other"); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("the dead process's other key after its lease ended: %v; want ErrNotHeld", err)
	}
	h, err := c.Inspect(ctx, "k")
	if err != nil || h.Token != toks[0] || h.Owner != owner {
		t.Fatalf("resumed key after the dead process's lease ended: %+v, %v; want held with token %d", h, err, toks[0])
	}
	select {
	case <-l.Done():
		t.Fatalf("resumed lease lost: %v", context.Cause(l.Context()))
	default:
	}
	if err := l.Renew(ctx); err != nil {
		t.Errorf("Renew of the resumed lease: %v", err)
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release of the resumed lease: %v", err)
	}
	if _, err := c.Inspect(ctx, "k"); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("key after the resumed lease's release: %v; want ErrNotHeld", err)
	}
}

// A dead process's lease that etcd revoked (or let expire) before the
// resume, or between its read and its transaction, is not resumed, and
// the resume leaves nothing behind. Shown to fail by removing the
// CreateRevision comparison from the transaction: the late case then puts
// a new entry, whose create revision is not the token it reports.
func TestResumeAfterTheLeaseEnded(t *testing.T) {
	ctx, cli, d, c := resumeSetup(t)
	const owner = "dead-owner"
	old, toks := deadHolder(t, ctx, cli, d, owner, "k")
	if _, err := cli.Revoke(ctx, old); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if l, err := c.TryAcquire(ctx, "k", fence.WithResume(owner, toks[0])); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("resume after the lease was revoked: %v; want ErrNotHeld", err)
		if err == nil {
			_ = l.Release(ctx)
		}
	}

	old, toks = deadHolder(t, ctx, cli, d, owner, "k")
	fenceetcd.SetAfterResumeRead(func(string) {
		if _, err := cli.Revoke(ctx, old); err != nil {
			t.Errorf("Revoke: %v", err)
		}
	})
	t.Cleanup(func() { fenceetcd.SetAfterResumeRead(nil) })
	if l, err := c.TryAcquire(ctx, "k", fence.WithResume(owner, toks[0])); !errors.Is(err, fence.ErrNotHeld) {
		t.Errorf("resume whose lease was revoked after its read: %v; want ErrNotHeld", err)
		if err == nil {
			_ = l.Release(ctx)
		}
	}
	fenceetcd.SetAfterResumeRead(nil)
	resp, err := cli.Get(ctx, d.Dir("k"), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("entries left under %s: %d, %v; want none", d.Dir("k"), resp.Count, err)
	}
}

// The resumed entry's name is the dead process's, not one of this
// session's: if that name is taken again by a new entry (the old process
// was not dead after all, released and acquired again), the resumed
// lease's Release must not delete it. Shown to fail by making Release a
// plain Delete for resumed claims too.
func TestResumedReleaseComparesToken(t *testing.T) {
	ctx, cli, d, c := resumeSetup(t)
	const owner = "dead-owner"
	old, toks := deadHolder(t, ctx, cli, d, owner, "k")
	l, err := c.TryAcquire(ctx, "k", fence.WithResume(owner, toks[0]))
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	name := d.Dir("k") + strconv.FormatInt(int64(old), 16) + ".0"
	if _, err := cli.Delete(ctx, name); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	put, err := cli.Put(ctx, name, `{"owner":"`+owner+`"}`, clientv3.WithLease(old))
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if err := l.Release(ctx); !errors.Is(err, fence.ErrLost) {
		t.Errorf("Release of the resumed lease whose entry was replaced: %v; want ErrLost", err)
	}
	want, err := d.TokenOf(ctx, put.Header.Revision)
	if err != nil {
		t.Fatalf("TokenOf: %v", err)
	}
	h, err := c.Inspect(ctx, "k")
	if err != nil || h.Token != want {
		t.Errorf("the new entry after the resumed lease's Release: %+v, %v; want held with token %d", h, err, want)
	}
	if _, err := cli.Revoke(ctx, old); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
}
