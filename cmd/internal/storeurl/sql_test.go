package storeurl_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/cmd/internal/storeurl"
	"github.com/fencing/fence/fencemysql"
	"github.com/fencing/fence/fencepg"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func TestOpenPostgres(t *testing.T) {
	srv := testserver.Postgres(t)
	ctx := context.Background()
	base := strings.Replace(srv.DSN(), "postgres://postgres@", "postgres://postgres:s3cret@", 1) // trust auth ignores it
	for raw, want := range map[string]string{
		base:                   "*fencepg.LeaseStore",
		base + "&mode=lease":   "*fencepg.LeaseStore",
		base + "&mode=session": "*fencepg.SessionStore",
		strings.Replace(base, "postgres:", "postgresql:", 1) + "&mode=session&tokens_table=other_tokens": "*fencepg.SessionStore",
	} {
		drv, closer, err := storeurl.Open(ctx, raw)
		if err != nil {
			t.Errorf("Open(%s): %v", storeurl.Redact(raw), err)
			continue
		}
		switch drv.(type) {
		case *fencepg.LeaseStore, *fencepg.SessionStore:
		default:
			t.Errorf("Open(%s) = %T; want %s", storeurl.Redact(raw), drv, want)
		}
		useDriver(t, drv)
		if err := closer.Close(); err != nil {
			t.Error(err)
		}
	}
	for _, raw := range []string{base + "&mode=transaction", base + "&mode=nope", base + "&setup=maybe", base + "&locks_table=a%3Bb"} {
		_, _, err := storeurl.Open(ctx, raw)
		if !errors.Is(err, storeurl.ErrBadURL) {
			t.Errorf("Open(%s): %v; want ErrBadURL", storeurl.Redact(raw), err)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("error shows the password: %v", err)
		}
	}
}

func TestOpenMySQL(t *testing.T) {
	srv := testserver.MariaDB(t)
	ctx := context.Background()
	u, _ := url.Parse(srv.URL())
	for _, raw := range []string{u.String(), u.String() + "?prefix=app&table=app_tokens&timeout=5s"} {
		drv, closer, err := storeurl.Open(ctx, raw)
		if err != nil {
			t.Errorf("Open(%s): %v", raw, err)
			continue
		}
		if _, ok := drv.(*fencemysql.Store); !ok {
			t.Errorf("Open(%s) = %T; want *fencemysql.Store", raw, drv)
		}
		useDriver(t, drv)
		if err := closer.Close(); err != nil {
			t.Error(err)
		}
	}
	for _, raw := range []string{
		"mysql://root@" + u.Host + "/", "mysql://root@/test", "mysql://root@" + u.Host + "/test?prefix=BAD",
		"mysql://root@" + u.Host + "/test?setup=maybe", "mysql://root:pw@" + u.Host + "/test?socket=/x",
	} {
		_, _, err := storeurl.Open(ctx, raw)
		if !errors.Is(err, storeurl.ErrBadURL) {
			t.Errorf("Open(%s): %v; want ErrBadURL", storeurl.Redact(raw), err)
		}
	}
}

// useDriver takes and releases a key through drv.
func useDriver(t *testing.T, drv fence.Driver) {
	t.Helper()
	ctx := context.Background()
	c := fence.New(drv, fence.WithTTL(10*time.Second))
	l, err := c.TryAcquire(ctx, "storeurl-test")
	if err != nil {
		t.Errorf("TryAcquire through %T: %v", drv, err)
		return
	}
	if err := l.Release(ctx); err != nil {
		t.Errorf("Release through %T: %v", drv, err)
	}
}
