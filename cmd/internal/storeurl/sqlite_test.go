package storeurl_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fencing/fence/cmd/internal/storeurl"
	"github.com/fencing/fence/fencesqlite"
)

func TestOpenSQLite(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	for raw, want := range map[string]string{
		"sqlite://" + dir + "/a.db":                    dir + "/a.db",
		"sqlite://localhost" + dir + "/b.db":           dir + "/b.db",
		"SQLITE://" + dir + "/c.db?busy_timeout=250ms": dir + "/c.db",
		"sqlite://" + dir + "/with%20space.db":         dir + "/with space.db",
		"sqlite://" + dir + "/sub/../d.db":             dir + "/d.db",
		"sqlite://" + dir + "/a.db?busy_timeout=1m30s": dir + "/a.db",
		"sqlite:" + dir + "/e.db":                      dir + "/e.db",
	} {
		drv, closer, err := storeurl.Open(ctx, raw)
		if err != nil {
			t.Errorf("Open(%q): %v", raw, err)
			continue
		}
		s, ok := drv.(*fencesqlite.Store)
		if !ok || s.Path() != want {
			t.Errorf("Open(%q) = %T, want the SQLite store in %s", raw, drv, want)
		}
		useDriver(t, drv)
		if err := closer.Close(); err != nil {
			t.Error(err)
		}
		if _, err := os.Stat(want); err != nil {
			t.Errorf("Open(%q): no database file: %v", raw, err)
		}
	}
	for _, raw := range []string{
		"sqlite:relative.db",
		"sqlite://otherhost" + dir + "/x.db",
		"sqlite://",
		"sqlite://" + dir + "/",
		"sqlite://" + dir + "/x.db?mode=1",
		"sqlite://" + dir + "/x.db?busy_timeout=0",
		"sqlite://" + dir + "/x.db?busy_timeout=soon",
	} {
		_, _, err := storeurl.Open(ctx, raw)
		if !errors.Is(err, storeurl.ErrBadURL) {
			t.Errorf("Open(%q) = %v, want ErrBadURL", raw, err)
		}
		if _, err := os.Stat(filepath.Join(dir, "x.db")); err == nil {
			t.Fatalf("Open(%q) created the database", raw)
		}
	}
	// A well-formed URL of an unusable database is an open error.
	_, _, err := storeurl.Open(ctx, "sqlite://"+dir+"/missing/x.db")
	if err == nil || errors.Is(err, storeurl.ErrBadURL) || !strings.Contains(err.Error(), "missing") {
		t.Errorf("Open(database in a missing directory) = %v, want an open error", err)
	}
}
