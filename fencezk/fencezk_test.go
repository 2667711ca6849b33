package fencezk_test

import (
	"context"
	"errors"
	"io"
	"log"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/goleak"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencetest"
	"github.com/fencing/fence/fencezk"
	"github.com/fencing/fence/internal/testserver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testserver.IgnoreLeaks())
}

// The tests' lease TTL and session timeout: the TTL may not exceed the
// session timeout, and a killed holder's keys are freed when its session
// expires.
const (
	ttl            = 2 * time.Second
	sessionTimeout = 3 * time.Second
)

// startZooKeeper starts a private ZooKeeper that removes empty containers
// every half second instead of every minute, so tests can see them go.
func startZooKeeper(t *testing.T) *testserver.ZooKeeperServer {
	t.Helper()
	t.Setenv("JAVA_TOOL_OPTIONS", "-Dznode.container.checkIntervalMs=500")
	return testserver.ZooKeeper(t)
}

// rawConn is a plain ZooKeeper connection for the tests' own looks and
// faults.
func rawConn(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	conn, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(log.New(io.Discard, "", 0)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return conn
}

func open(connect string) (fence.Driver, func() error, error) {
	d, err := fencezk.Dial(strings.Split(connect, ","), sessionTimeout)
	if err != nil {
		return nil, nil, err
	}
	return d, d.Close, nil
}

// children returns the queue of key (znode names, lowest sequence first).
func children(t *testing.T, conn *zk.Conn, d *fencezk.Driver, key string) []string {
	t.Helper()
	kids, _, err := conn.Children(d.KeyPath(key))
	if err == zk.ErrNoNode {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(kids, func(a, b string) int { return strings.Compare(a[len(a)-10:], b[len(b)-10:]) })
	return kids
}

// kindPath is the container of key's queue of kind (see kinds.go).
func kindPath(d *fencezk.Driver, key string, kind fence.Kind) string {
	switch kind {
	case fence.KindSemaphore:
		return d.KeyPath(key) + "%sem"
	case fence.KindRead, fence.KindWrite:
		return d.KeyPath(key) + "%rw"
	}
	return d.KeyPath(key)
}

func TestConformance(t *testing.T) {
	fencetest.Run(t, fencetest.Config{
		TTL:          ttl,
		SessionBound: true,
		Setup: func(t *testing.T) fencetest.Store {
			srv := startZooKeeper(t)
			conn := rawConn(t, srv.Addr())
			layout := fencezk.New(conn, sessionTimeout) // for its paths only
			return fencetest.Store{
				Connect: srv.Addr(),
				Delete: func(ctx context.Context, key string) error {
					kids := children(t, conn, layout, key)
					if len(kids) == 0 {
						return nil
					}
					return conn.Delete(layout.KeyPath(key)+"/"+kids[0], -1)
				},
				Queue: func(ctx context.Context, key string, kind fence.Kind) (int, error) {
					kids, _, err := conn.Children(kindPath(layout, key, kind))
					if errors.Is(err, zk.ErrNoNode) {
						return 0, nil
					}
					return len(kids), err
				},
				// Every znode of the keys under prefix: queue entries, and
				// the keys' containers, which the server removes once empty.
				Leftovers: func(ctx context.Context, prefix string) ([]string, error) {
					keys, _, err := conn.Children(fencezk.DefaultRoot)
					if err == zk.ErrNoNode {
						return nil, nil
					}
					var left []string
					enc := strings.TrimPrefix(layout.KeyPath(prefix), fencezk.DefaultRoot+"/")
					for _, k := range keys {
						if strings.HasPrefix(k, enc) {
							left = append(left, fencezk.DefaultRoot+"/"+k)
						}
					}
					return left, err
				},
			}
		},
		Open: open,
	})
}
