package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fenceetcd"
)

// sessionTTL is the etcd lease TTL of the peer's and the raw contender's
// sessions, in seconds (fence's driver picks 1.5 times the lease TTL).
const sessionTTL = 45

func etcdContenders(endpoints []string) []Contender {
	return []Contender{
		{Store: "etcd", Name: "fence", Role: RoleFence,
			Desc: "fenceetcd: one Txn (put if the key's queue is empty) + one Delete of its own entry; token = create revision + the epoch base read in the same Txn; waiters watch their predecessor (FIFO)",
			Open: func(ctx context.Context, rt *atomic.Int64) (Client, error) {
				cli, err := newEtcd(endpoints, rt)
				if err != nil {
					return nil, err
				}
				d := fenceetcd.New(cli)
				return &fenceClient{c: fence.New(d, fence.WithTTL(TTL)), close: func() error {
					err := d.Close()
					return errors.Join(err, cli.Close())
				}}, nil
			}},
		{Store: "etcd", Name: "etcd-mutex", Role: RolePeer,
			Desc: "go.etcd.io/etcd/client/v3/concurrency Mutex on a Session: one Txn (put + read the first) + one Delete; waiters watch their predecessor (FIFO)",
			Open: func(ctx context.Context, rt *atomic.Int64) (Client, error) {
				cli, err := newEtcd(endpoints, rt)
				if err != nil {
					return nil, err
				}
				s, err := concurrency.NewSession(cli, concurrency.WithTTL(sessionTTL))
				if err != nil {
					cli.Close()
					return nil, err
				}
				return &etcdMutexClient{cli: cli, s: s}, nil
			}},
		{Store: "etcd", Name: "raw", Role: RoleRaw,
			Desc: "one Txn (put with lease if absent) + one Txn (compare create revision, delete); token = create revision; waiters watch the key",
			Open: func(ctx context.Context, rt *atomic.Int64) (Client, error) {
				cli, err := newEtcd(endpoints, rt)
				if err != nil {
					return nil, err
				}
				return newRawEtcd(ctx, cli)
			}},
	}
}

func quietLogger() *zap.Logger { return zap.NewNop() }

func newEtcd(endpoints []string, rt *atomic.Int64) (*clientv3.Client, error) {
	count := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		rt.Add(1)
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	return clientv3.New(clientv3.Config{
		Endpoints:   endpoints,
		DialTimeout: 5 * time.Second,
		Logger:      quietLogger(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(count)},
	})
}

// etcd's own Mutex

type etcdMutexClient struct {
	cli *clientv3.Client
	s   *concurrency.Session
}

func (e *etcdMutexClient) Locker() Locker {
	return &etcdMutexLocker{s: e.s, mutexes: map[string]*concurrency.Mutex{}}
}

func (e *etcdMutexClient) Close() error {
	return errors.Join(e.s.Close(), e.cli.Close())
}

type etcdMutexLocker struct {
	s       *concurrency.Session
	mutexes map[string]*concurrency.Mutex
	held    *concurrency.Mutex
}

func (e *etcdMutexLocker) Lock(ctx context.Context, key string) error {
	m := e.mutexes[key]
	if m == nil {
		m = concurrency.NewMutex(e.s, "bench-mutex/"+key)
		e.mutexes[key] = m
	}
	if err := m.Lock(ctx); err != nil {
		return err
	}
	e.held = m
	return nil
}

func (e *etcdMutexLocker) Unlock(ctx context.Context) error { return e.held.Unlock(ctx) }

// raw: a key bound to a lease, put only if absent; its create revision is
// the token.

type rawEtcdClient struct {
	cli    *clientv3.Client
	lease  clientv3.LeaseID
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newRawEtcd(ctx context.Context, cli *clientv3.Client) (*rawEtcdClient, error) {
	g, err := cli.Grant(ctx, sessionTTL)
	if err != nil {
		cli.Close()
		return nil, err
	}
	kctx, cancel := context.WithCancel(context.Background())
	ka, err := cli.KeepAlive(kctx, g.ID)
	if err != nil {
		cancel()
		cli.Close()
		return nil, err
	}
	r := &rawEtcdClient{cli: cli, lease: g.ID, cancel: cancel}
	r.wg.Go(func() {
		for range ka { //nolint:revive // drain the keepalive replies
		}
	})
	return r, nil
}

func (r *rawEtcdClient) Locker() Locker {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &rawEtcdLocker{c: r, id: hex.EncodeToString(b[:])}
}

func (r *rawEtcdClient) Close() error {
	r.cancel()
	r.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := r.cli.Revoke(ctx, r.lease)
	return errors.Join(err, r.cli.Close())
}

type rawEtcdLocker struct {
	c   *rawEtcdClient
	id  string
	key string
	rev int64
}

func (r *rawEtcdLocker) Lock(ctx context.Context, key string) error {
	r.key = "bench-raw/" + key
	cli := r.c.cli
	for {
		resp, err := cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(r.key), "=", 0)).
			Then(clientv3.OpPut(r.key, r.id, clientv3.WithLease(r.c.lease))).
			Commit()
		if err != nil {
			return err
		}
		if resp.Succeeded {
			r.rev = resp.Header.Revision
			return nil
		}
		// Wait for a delete after the revision we looked at.
		wctx, cancel := context.WithCancel(ctx)
		wch := cli.Watch(wctx, r.key, clientv3.WithRev(resp.Header.Revision+1), clientv3.WithFilterPut())
		for wr := range wch {
			if len(wr.Events) > 0 || wr.Err() != nil {
				break
			}
		}
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func (r *rawEtcdLocker) Unlock(ctx context.Context) error {
	resp, err := r.c.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(r.key), "=", r.rev)).
		Then(clientv3.OpDelete(r.key)).
		Commit()
	if err == nil && !resp.Succeeded {
		err = errors.New("raw etcd: key was not ours")
	}
	return err
}
