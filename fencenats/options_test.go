package fencenats_test

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/fencing/fence/fencenats"
)

// streamConfig is the configuration of bucket's stream.
func streamConfig(t *testing.T, js jetstream.JetStream, bucket string) jetstream.StreamConfig {
	t.Helper()
	s, err := js.Stream(ctxT(t), "KV_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	return info.Config
}

// The options shape the bucket the driver creates; the defaults are file
// storage, one replica and one-second markers. (WithBucketMaxAge is
// TestBucketModes'.)
func TestBucketOptions(t *testing.T) {
	srv := startNATS(t)
	ctx := ctxT(t)
	js := connect(t, srv.URL())

	if _, err := fencenats.New(ctx, js, "plain"); err != nil {
		t.Fatal(err)
	}
	cfg := streamConfig(t, js, "plain")
	if cfg.Storage != jetstream.FileStorage || cfg.Replicas != 1 || cfg.SubjectDeleteMarkerTTL != time.Second {
		t.Errorf("default bucket: storage %v, %d replicas, markers %v; want file, 1, 1s", cfg.Storage, cfg.Replicas, cfg.SubjectDeleteMarkerTTL)
	}

	t.Run("WithMemoryStorage", func(t *testing.T) {
		if _, err := fencenats.New(ctx, js, "mem", fencenats.WithMemoryStorage()); err != nil {
			t.Fatal(err)
		}
		if s := streamConfig(t, js, "mem").Storage; s != jetstream.MemoryStorage {
			t.Errorf("storage %v; want memory", s)
		}
	})
	t.Run("WithMarkerTTL", func(t *testing.T) {
		if _, err := fencenats.New(ctx, js, "markers", fencenats.WithMarkerTTL(5*time.Second)); err != nil {
			t.Fatal(err)
		}
		if m := streamConfig(t, js, "markers").SubjectDeleteMarkerTTL; m != 5*time.Second {
			t.Errorf("marker TTL %v; want 5s", m)
		}
	})
	t.Run("WithReplicas", func(t *testing.T) {
		// A single server cannot keep three replicas: the stream the
		// option asks for is refused, where the default one is created.
		_, err := fencenats.New(ctx, js, "replicated", fencenats.WithReplicas(3))
		if err == nil || !strings.Contains(err.Error(), "replicas") {
			t.Errorf("three replicas on one server: %v; want the server's refusal", err)
		}
	})
}
