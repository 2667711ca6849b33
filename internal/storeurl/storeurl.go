// Package storeurl maps the store URLs of the fence command (--store,
// FENCE_STORE) to drivers. It is the one place that knows them: each
// driver adds one small file here that registers its scheme.
//
// Credentials in store URLs are never printed: every message that shows a
// URL shows Redact(url).
package storeurl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/fencing/fence"
)

// OpenFunc opens the store a parsed URL names. The io.Closer frees what
// the driver holds (connections); it must not be nil.
type OpenFunc func(ctx context.Context, u *url.URL) (fence.Driver, io.Closer, error)

// ErrBadURL matches the errors for a store URL that cannot name a store:
// malformed, of an unknown scheme, or with parameters its driver does not
// take. Errors opening a well-formed URL (an unreachable server) do not
// match it.
var ErrBadURL = errors.New("bad store URL")

type scheme struct {
	open  OpenFunc
	forms []string
}

var (
	mu      sync.RWMutex
	schemes = map[string]scheme{}
)

// Register makes Open accept URLs of scheme, opened by open. forms are
// examples of the accepted URLs, shown in help and error messages;
// without them, "scheme://..." is shown. Register panics if scheme is
// registered twice; drivers call it from init.
func Register(name string, open OpenFunc, forms ...string) {
	name = strings.ToLower(name)
	mu.Lock()
	defer mu.Unlock()
	if _, dup := schemes[name]; dup {
		panic("storeurl: scheme " + name + " registered twice")
	}
	if len(forms) == 0 {
		forms = []string{name + "://..."}
	}
	schemes[name] = scheme{open: open, forms: forms}
}

// Registered reports whether Open accepts URLs of scheme.
func Registered(scheme string) bool {
	mu.RLock()
	defer mu.RUnlock()
	_, ok := schemes[strings.ToLower(scheme)]
	return ok
}

// Forms returns examples of every accepted store URL, sorted by scheme,
// with "a plain path" for the file store.
func Forms() []string {
	mu.RLock()
	defer mu.RUnlock()
	names := make([]string, 0, len(schemes))
	for n := range schemes {
		names = append(names, n)
	}
	slices.Sort(names)
	var forms []string
	for _, n := range names {
		forms = append(forms, schemes[n].forms...)
	}
	return forms
}

func badURL(raw, format string, args ...any) error {
	return fmt.Errorf("%w %q: %s; accepted forms: %s", ErrBadURL, Redact(raw), fmt.Sprintf(format, args...),
		strings.Join(Forms(), ", "))
}

// Open opens the store raw names: a URL of a registered scheme, or a plain
// path (absolute, relative, or starting with ~/), which means the file
// store in that directory. Errors for a URL that cannot name a store match
// ErrBadURL and list the accepted forms; no error shows a credential.
func Open(ctx context.Context, raw string) (fence.Driver, io.Closer, error) {
	u, err := Parse(raw)
	if err != nil {
		return nil, nil, err
	}
	mu.RLock()
	s, ok := schemes[u.Scheme]
	mu.RUnlock()
	if !ok {
		return nil, nil, badURL(raw, "unknown scheme %q", u.Scheme)
	}
	drv, closer, err := s.open(ctx, u)
	if err != nil {
		if errors.Is(err, ErrBadURL) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("open store %s: %w", Redact(raw), err)
	}
	return drv, closer, nil
}

// Parse parses raw as Open does, turning a plain path into a file URL,
// without opening anything.
func Parse(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, badURL(raw, "empty")
	}
	if isPath(raw) {
		p, err := expandPath(raw)
		if err != nil {
			return nil, badURL(raw, "%v", err)
		}
		return &url.URL{Scheme: "file", Path: p}, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // url.Error repeats the URL, credentials included
		}
		return nil, badURL(raw, "malformed: %v", err)
	}
	u.Scheme = strings.ToLower(u.Scheme)
	return u, nil
}

// isPath reports whether raw is a plain path rather than a URL: it starts
// with "/", "." or "~", or has no scheme.
func isPath(raw string) bool {
	if strings.HasPrefix(raw, "/") || strings.HasPrefix(raw, ".") || strings.HasPrefix(raw, "~") {
		return true
	}
	i := strings.IndexByte(raw, ':')
	if i <= 0 {
		return true
	}
	for j, c := range raw[:i] {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || j > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return true
		}
	}
	return false
}

func expandPath(p string) (string, error) {
	if p == "~" || strings.HasPrefix(p, "~/") {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		p = filepath.Join(home, p[1:])
	}
	return filepath.Abs(p)
}

const redacted = "xxxxx"

// secretParam reports whether a query parameter may carry a credential.
// It errs on the side of hiding.
func secretParam(name string) bool {
	name = strings.ToLower(name)
	for _, s := range []string{"pass", "pwd", "secret", "token", "sig", "key", "auth", "cred", "sas"} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

var (
	looseUserinfo = regexp.MustCompile(`(//[^/?#@]*?):[^/?#]*@`)
	looseParam    = regexp.MustCompile(`([?&;]([^=&;#]*)=)([^&;#]*)`)
)

// Redact returns raw with the password of its user info and the values of
// query parameters that may carry credentials (password, token, sig, key,
// secret, ...) replaced by "xxxxx". It works on URLs url.Parse refuses
// too. A plain path is returned as it is.
func Redact(raw string) string {
	if isPath(raw) {
		return raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return redactLoose(raw)
	}
	if u.User != nil {
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), redacted)
		}
	}
	if u.RawQuery != "" {
		q, err := url.ParseQuery(u.RawQuery)
		if err != nil {
			return redactLoose(raw)
		}
		changed := false
		for k := range q {
			if secretParam(k) {
				for i := range q[k] {
					q[k][i] = redacted
				}
				changed = true
			}
		}
		if changed {
			u.RawQuery = q.Encode()
		}
	}
	return u.String()
}

func redactLoose(raw string) string {
	s := looseUserinfo.ReplaceAllString(raw, "${1}:"+redacted+"@")
	return looseParam.ReplaceAllStringFunc(s, func(m string) string {
		sub := looseParam.FindStringSubmatch(m)
		if secretParam(sub[2]) {
			return sub[1] + redacted
		}
		return m
	})
}

// nopCloser is the io.Closer of stores that hold nothing open.
type nopCloser struct{}

func (nopCloser) Close() error { return nil }
