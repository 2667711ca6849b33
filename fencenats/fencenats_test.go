package fencenats_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testkit/leakcheck"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencenats"
	"github.com/fencing/fence/fencetest"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func TestMain(m *testing.M) {
	leakcheck.VerifyTestMain(m, testserver.IgnoreLeaks())
}

// ttl is the tests' lease TTL; per-message TTLs have a granularity of one
// second.
const ttl = 2 * time.Second

// startNATS starts a private nats-server with JetStream; per-key TTLs need
// 2.11 or newer.
func startNATS(t *testing.T) *testserver.NATSServer {
	t.Helper()
	srv := testserver.NATS(t)
	if !srv.AtLeast("2.11") {
		t.Fatalf("nats-server %s is too old for per-message TTLs (need 2.11)", srv.Version())
	}
	return srv
}

func connect(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// Connect strings are "url|bucket" or "url|bucket|maxage" for a bucket
// that expires keys by its max age.
func open(connect string) (fence.Driver, func() error, error) {
	parts := strings.Split(connect, "|")
	var opts []fencenats.Option
	if len(parts) > 2 {
		opts = append(opts, fencenats.WithBucketMaxAge(ttl))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := fencenats.Dial(ctx, parts[0], parts[1], opts...)
	if err != nil {
		return nil, nil, err
	}
	return d, d.Close, nil
}

func conformanceStore(t *testing.T, connect string) fencetest.Store {
	parts := strings.Split(connect, "|")
	drv, closeDrv, err := open(connect)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeDrv() })
	d := drv.(*fencenats.Store)
	kv := d.KeyValue()
	return fencetest.Store{
		Connect: connect,
		Delete: func(ctx context.Context, key string) error {
			// As an operator would: nats kv del.
			return kv.Delete(ctx, d.Name(key))
		},
		// Every message of the key's subject goes, markers included.
		// Tokens are the stream's sequence numbers, which never go back
		// while the stream lives.
		Wipe: func(ctx context.Context, key string) error {
			st, err := kv.Status(ctx)
			if err != nil {
				return err
			}
			name := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Name
			s, err := connectJS(t, parts[0]).Stream(ctx, name)
			if err != nil {
				return err
			}
			return s.Purge(ctx, jetstream.WithPurgeSubject("$KV."+parts[1]+"."+d.Name(key)))
		},
		// Every subject of the bucket that still has a message, but the
		// delete markers Store.Delete leaves (an operator's business).
		Leftovers: func(ctx context.Context, prefix string) ([]string, error) {
			st, err := kv.Status(ctx)
			if err != nil {
				return nil, err
			}
			name := st.(*jetstream.KeyValueBucketStatus).StreamInfo().Config.Name
			s, err := connectJS(t, parts[0]).Stream(ctx, name)
			if err != nil {
				return nil, err
			}
			return leftovers(ctx, kv, d, prefix, s)
		},
	}
}

func connectJS(t *testing.T, url string) jetstream.JetStream { return connect(t, url) }

// leftovers lists the subjects under prefix that still hold a message,
// but those whose last message is an operator's delete marker (what
// Store.Delete leaves: kv.Delete writes a DEL marker). The driver's own
// releases purge, and their PURGE markers must end with their TTL.
func leftovers(ctx context.Context, kv jetstream.KeyValue, d *fencenats.Store, prefix string, s jetstream.Stream) ([]string, error) {
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("$KV."+kv.Bucket()+".>"))
	if err != nil {
		return nil, err
	}
	enc := d.Name(prefix)
	var left []string
	for subj := range info.State.Subjects {
		name := strings.TrimPrefix(subj, "$KV."+kv.Bucket()+".")
		if !strings.HasPrefix(name, enc) {
			continue
		}
		m, err := s.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // gone since Info (a marker's TTL ran out)
		}
		if err != nil {
			return nil, err
		}
		if m.Header.Get("KV-Operation") == "DEL" {
			continue
		}
		left = append(left, subj)
	}
	return left, nil
}

// outage kills the private nats-server; restore starts it again on the
// same port with its JetStream store directory, so the bucket and its
// sequence come back, and the clients' connections reconnect on their own
// (nats.go's defaults: every 2s, 60 times).
func outage(srv *testserver.NATSServer) func(t *testing.T) func() {
	return func(t *testing.T) func() {
		srv.Kill()
		return func() {
			if err := srv.Start(); err != nil {
				t.Fatalf("restart nats-server: %v", err)
			}
		}
	}
}

// NATS KV entries end with their TTL, bound to no session: no
// KillSession.
func TestConformance(t *testing.T) {
	t.Parallel() // on a server of its own
	fencetest.Run(t, fencetest.Config{
		TTL: ttl,
		// No Store.Outage here (TestConformanceMaxAge has it): after
		// nats-server 2.15.2 is killed and restarted, a message purged
		// long before the kill can be back in the stream (seen: the
		// hour-TTL lease of the BadInput check, released 35s before, whose
		// PURGE marker had expired), and Leftovers then finds it.
		Setup: func(t *testing.T) fencetest.Store {
			return conformanceStore(t, startNATS(t).URL()+"|fencetest")
		},
		Open: open,
	})
}

// TestConformanceMaxAge runs the suite on a bucket that expires keys by its
// max age, as on servers older than 2.11.
func TestConformanceMaxAge(t *testing.T) {
	t.Parallel() // on a server of its own
	fencetest.Run(t, fencetest.Config{
		TTL: ttl,
		Setup: func(t *testing.T) fencetest.Store {
			srv := startNATS(t)
			st := conformanceStore(t, srv.URL()+"|fencetest|maxage")
			st.Outage = outage(srv)
			return st
		},
		Open: open,
	})
}
