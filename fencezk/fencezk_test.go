package fencezk_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testkit/leakcheck"
	"github.com/go-zookeeper/zk"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencetest"
	"github.com/fencing/fence/fencezk"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m, testserver.IgnoreLeaks())
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
	opened.Store(d, struct{}{})
	return d, func() error {
		opened.Delete(d)
		return d.Close()
	}, nil
}

// opened holds the drivers open in this process, for killSession to find
// a session's password.
var opened sync.Map // *fencezk.Store -> struct{}

// killSession ends, in the server, the session of the holder of key in
// kind (the first znode of its queue), as its expiry would: it attaches to
// the session with its id and password on a connection of its own and
// closes it, then waits until the server has deleted the session's
// znodes. The holder's driver must be open in this process.
func killSession(conn *zk.Conn, layout *fencezk.Store, addr, key string, kind fence.Kind) error {
	parent := kindPath(layout, key, kind)
	kids, _, err := conn.Children(parent)
	if err != nil {
		return err
	}
	if len(kids) == 0 {
		return fmt.Errorf("no znode holds %s %q", kind, key)
	}
	slices.SortFunc(kids, func(a, b string) int { return strings.Compare(a[len(a)-10:], b[len(b)-10:]) })
	holder := parent + "/" + kids[0]
	_, st, err := conn.Get(holder)
	if err != nil {
		return err
	}
	var passwd []byte
	opened.Range(func(d, _ any) bool {
		c := d.(*fencezk.Store).Conn()
		if c.SessionID() == st.EphemeralOwner {
			// go-zookeeper keeps the session's password to itself.
			passwd = bytes.Clone(reflect.ValueOf(c).Elem().FieldByName("passwd").Bytes())
			return false
		}
		return true
	})
	if passwd == nil {
		return fmt.Errorf("the session %#x holding %s %q is not open in this process", st.EphemeralOwner, kind, key)
	}
	if err := closeSession(addr, st.EphemeralOwner, passwd); err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		exists, _, err := conn.Exists(holder)
		if err != nil || !exists {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s still exists after its session was closed", holder)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// closeSession speaks just enough of ZooKeeper's protocol to attach to the
// session id (a ConnectRequest with its password) and close it (a
// closeSession request, opcode -11).
func closeSession(addr string, id int64, passwd []byte) error {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	frame := func(fields ...any) error {
		var b bytes.Buffer
		for _, f := range fields {
			_ = binary.Write(&b, binary.BigEndian, f)
		}
		return binary.Write(c, binary.BigEndian, append(binary.BigEndian.AppendUint32(nil, uint32(b.Len())), b.Bytes()...))
	}
	reply := func() ([]byte, error) {
		var n uint32
		if err := binary.Read(c, binary.BigEndian, &n); err != nil {
			return nil, err
		}
		b := make([]byte, n)
		_, err := io.ReadFull(c, b)
		return b, err
	}
	// protocolVersion, lastZxidSeen, timeOut (ms), sessionId, passwd, readOnly
	if err := frame(int32(0), int64(0), int32(sessionTimeout.Milliseconds()), id, int32(len(passwd)), passwd, false); err != nil {
		return err
	}
	r, err := reply()
	if err != nil {
		return fmt.Errorf("attaching to session %#x: %w", id, err)
	}
	if len(r) < 16 || int64(binary.BigEndian.Uint64(r[8:16])) != id {
		return fmt.Errorf("the server refused to attach to session %#x (expired already?)", id)
	}
	// The request header: xid, type.
	if err := frame(int32(1), int32(-11)); err != nil {
		return err
	}
	r, err = reply()
	if err != nil {
		return fmt.Errorf("closing session %#x: %w", id, err)
	}
	if len(r) < 16 || binary.BigEndian.Uint32(r[12:16]) != 0 {
		return fmt.Errorf("closing session %#x: reply %x", id, r)
	}
	return nil
}

// children returns the queue of key (znode names, lowest sequence first).
func children(t *testing.T, conn *zk.Conn, d *fencezk.Store, key string) []string {
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
func kindPath(d *fencezk.Store, key string, kind fence.Kind) string {
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
				// The server killed: connections refused. Started again on
				// its data, with the sessions it restores.
				Outage: func(t *testing.T) func() {
					srv.Kill()
					return func() {
						if err := srv.Start(); err != nil {
							t.Fatalf("restart ZooKeeper: %v", err)
						}
					}
				},
				Delete: func(ctx context.Context, key string) error {
					kids := children(t, conn, layout, key)
					if len(kids) == 0 {
						return nil
					}
					return conn.Delete(layout.KeyPath(key)+"/"+kids[0], -1)
				},
				KillSession: func(_ context.Context, key string, kind fence.Kind) error {
					return killSession(conn, layout, srv.Addr(), key, kind)
				},
				// Every znode of the key in every kind. Tokens are czxids,
				// which the ensemble never issues twice: nothing of a key's
				// own keeps them growing.
				Wipe: func(_ context.Context, key string) error {
					for _, k := range []fence.Kind{fence.KindLock, fence.KindSemaphore, fence.KindWrite} {
						kids, _, err := conn.Children(kindPath(layout, key, k))
						if errors.Is(err, zk.ErrNoNode) {
							continue
						}
						if err != nil {
							return err
						}
						for _, kid := range kids {
							if err := conn.Delete(kindPath(layout, key, k)+"/"+kid, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
								return err
							}
						}
						if err := conn.Delete(kindPath(layout, key, k), -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
							return err
						}
					}
					return nil
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
