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

	"go.uber.org/goleak"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencefile"
	"github.com/fencing/fence/fencemem"
	"github.com/fencing/fence/internal/storeurl"
	"github.com/fencing/fence/internal/testserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testserver.IgnoreLeaks()) }

func TestOpenFile(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	t.Chdir(dir)
	t.Setenv("HOME", dir)
	for raw, want := range map[string]string{
		"file://" + dir + "/a":          dir + "/a",
		"file://localhost" + dir + "/b": dir + "/b",
		"FILE://" + dir + "/c":          dir + "/c",
		dir + "/d":                      dir + "/d",
		"./e":                           dir + "/e",
		"f":                             dir + "/f",
		"~/g":                           dir + "/g",
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
		msg := err.Error()
		if !strings.Contains(msg, "file:///path/to/dir") || !strings.Contains(msg, "mem:") {
			t.Errorf("Open(%q) error does not list the accepted forms: %s", raw, msg)
		}
		if strings.Contains(msg, "hunter2") {
			t.Errorf("Open(%q) error shows the password: %s", raw, msg)
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

func TestRedact(t *testing.T) {
	for raw, want := range map[string]string{
		"redis://:hunter2@localhost:6379/0":             "redis://:xxxxx@localhost:6379/0",
		"postgres://bob:hunter2@db/app?sslmode=disable": "postgres://bob:xxxxx@db/app?sslmode=disable",
		"postgres://bob@db/app?password=hunter2":        "postgres://bob@db/app?password=xxxxx",
		"redlock://:hunter2@h1:6379,h2:6379,h3:6379":    "redlock://:xxxxx@h1:6379,h2:6379,h3:6379",
		"azblob://acct/container?sig=hunter2&sv=2024":   "azblob://acct/container?sig=xxxxx&sv=2024",
		"nats://tok@localhost:4222?token=hunter2":       "nats://tok@localhost:4222?token=xxxxx",
		"mysql://root:hunter2@[::1/x?api_key=hunter2":   "mysql://root:xxxxx@[::1/x?api_key=xxxxx",
		"file:///var/lib/fence":                         "file:///var/lib/fence",
		"/var/lib/fence":                                "/var/lib/fence",
		"etcd://h1:2379,h2:2379/prefix?dial_timeout=5s": "etcd://h1:2379,h2:2379/prefix?dial_timeout=5s",
		"redis://user:p%40ss@host?client_secret=x&db=1": "redis://user:xxxxx@host?client_secret=xxxxx&db=1",
		"zk://h1:2181/fence?auth_digest=user%3Ahunter2": "zk://h1:2181/fence?auth_digest=xxxxx",
	} {
		got := storeurl.Redact(raw)
		if got != want {
			t.Errorf("Redact(%q) = %q, want %q", raw, got, want)
		}
		if strings.Contains(got, "hunter2") || strings.Contains(got, "p%40ss") {
			t.Errorf("Redact(%q) leaks: %q", raw, got)
		}
	}
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

func TestScrub(t *testing.T) {
	for _, c := range []struct{ raw, text, want string }{
		{"redis://u:hunter2@h:6379/0", "dial h:6379: auth hunter2 refused", "dial h:6379: auth xxxxx refused"},
		{"postgres://u:p%40ss@h/db", "password p@ss and p%40ss", "password xxxxx and xxxxx"},
		{"nats://h?token=s3cret&x=1", "token s3cret x=1", "token xxxxx x=1"},
		{"azblob://acct/c?sig=a%2Bb&sv=2024", "sig=a+b sig=a%2Bb sv=2024", "sig=xxxxx sig=xxxxx sv=2024"},
		{"redis://u:hunter2@h:bad port", "parse redis://u:hunter2@h:bad port", "parse redis://u:xxxxx@h:bad port"},
		{"/var/lib/fence", "open /var/lib/fence: denied", "open /var/lib/fence: denied"},
		{"redis://u@h", "user u", "user u"},
	} {
		if got := storeurl.Scrub(c.raw, c.text); got != c.want {
			t.Errorf("Scrub(%q, %q) = %q; want %q", c.raw, c.text, got, c.want)
		}
	}
}
