package storeurl_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fencing/fence/internal/testkit/leakcheck"

	"github.com/fencing/fence"
	"github.com/fencing/fence/cmd/internal/storeurl"
	"github.com/fencing/fence/fencefile"
	"github.com/fencing/fence/fencemem"
	"github.com/fencing/fence/internal/testkit/testserver"
)

func TestMain(m *testing.M) { leakcheck.VerifyTestMain(m, testserver.IgnoreLeaks()) }

func TestOpenFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("HOME", dir)
	for raw, want := range map[string]string{
		"file://" + dir + "/a":            dir + "/a",
		"file://localhost" + dir + "/b":   dir + "/b",
		"FILE://" + dir + "/c":            dir + "/c",
		dir + "/d":                        dir + "/d",
		"./e":                             dir + "/e",
		"../" + filepath.Base(dir) + "/f": dir + "/f",
		"~/g":                             dir + "/g",
		".":                               dir,
		"~":                               dir,
		"file:" + dir + "/h":              dir + "/h",
	} {
		drv, closer, err := storeurl.Open(ctx, raw)
		if err != nil {
			t.Errorf("Open(%q): %v", raw, err)
			continue
		}
		s, ok := drv.(*fencefile.Store)
		if !ok || s.Dir() != want {
			t.Errorf("Open(%q) = %T %v, want the file store in %s", raw, drv, drv, want)
		}
		if err := closer.Close(); err != nil {
			t.Error(err)
		}
	}
}

func TestOpenMem(t *testing.T) {
	ctx := context.Background()
	a, _, err := storeurl.Open(ctx, "mem:")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := a.(*fencemem.Store); !ok {
		t.Fatalf("mem: opened %T", a)
	}
	b, _, _ := storeurl.Open(ctx, "mem:")
	c, _, _ := storeurl.Open(ctx, "mem:other")
	if a != b || a == c {
		t.Errorf("mem: stores are not shared by name")
	}
}

func TestOpenErrors(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join(t.TempDir(), "f")
	os.WriteFile(file, nil, 0o600)
	for _, raw := range []string{
		"",
		"bogus://host/x",
		"redis-ish://u:hunter2@host",
		"file:relative",
		"file://otherhost/x",
		"file:///tmp/x?mode=1",
		"mem:?x=1",
		"http://u:hunter2@[::1/x",
	} {
		_, _, err := storeurl.Open(ctx, raw)
		if !errors.Is(err, storeurl.ErrBadURL) {
			t.Errorf("Open(%q) = %v, want ErrBadURL", raw, err)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "hunter2") || strings.Count(msg, "\n") > 0 {
			t.Errorf("Open(%q) error shows the password, or takes several lines: %s", raw, msg)
		}
	}
	// A well-formed URL naming an unusable store is an open error, not a
	// bad URL.
	_, _, err := storeurl.Open(ctx, "file://"+file)
	if err == nil || errors.Is(err, storeurl.ErrBadURL) {
		t.Errorf("Open(file URL of a regular file) = %v, want an open error", err)
	}
}

var testRuns atomic.Int32

func TestRegister(t *testing.T) {
	var got *url.URL
	// A new scheme per run: the registry lives as long as the process,
	// across -count=N.
	scheme := fmt.Sprintf("testscheme%d", testRuns.Add(1))
	storeurl.Register(scheme, func(_ context.Context, u *url.URL) (fence.Driver, io.Closer, error) {
		got = u
		return fencemem.New(), io.NopCloser(nil), nil
	})
	if _, _, err := storeurl.Open(context.Background(), strings.ToUpper(scheme)+"://h:1/p?q=1"); err != nil {
		t.Fatal(err)
	}
	if got == nil || got.Host != "h:1" || got.Path != "/p" || got.Query().Get("q") != "1" {
		t.Errorf("driver got %v", got)
	}
	if !storeurl.Registered(strings.ToUpper(scheme)) || storeurl.Registered(scheme+"x") {
		t.Errorf("Registered(%q) = false or Registered(%q) = true", scheme, scheme+"x")
	}
	if !strings.Contains(strings.Join(storeurl.Forms(), " "), scheme+"://...") {
		t.Errorf("Forms() = %v lacks the default form", storeurl.Forms())
	}
	defer func() {
		if recover() == nil {
			t.Error("registering a scheme twice did not panic")
		}
	}()
	storeurl.Register(scheme, nil)
}

func TestDefaultDir(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/x/state")
	if d, err := storeurl.DefaultDir(); err != nil || d != "/x/state/fence" {
		t.Errorf("DefaultDir with XDG_STATE_HOME = %q, %v", d, err)
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "/home/u")
	if d, err := storeurl.DefaultDir(); err != nil || d != "/home/u/.local/state/fence" {
		t.Errorf("DefaultDir with HOME = %q, %v", d, err)
	}
}
