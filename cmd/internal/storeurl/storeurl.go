// Package storeurl maps the store URLs of the fence command (--store,
// FENCE_STORE) to drivers. It is the one place that knows them: each
// driver adds one small file here that registers its scheme.
//
// A store is named by a path (the file store in that directory) or by a
// URL of a registered scheme; anything else is an error, never another
// store. Credentials in store URLs are never printed: every message that
// shows a URL shows it rebuilt from its parsed parts with the secret ones
// replaced (see Redact).
package storeurl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/fencing/fence"
)

// OpenFunc opens the store a parsed URL names. The io.Closer frees what
// the driver holds (connections); it must not be nil.
type OpenFunc func(ctx context.Context, u *url.URL) (fence.Driver, io.Closer, error)

// ErrBadURL matches the errors for a store URL that cannot name a store:
// neither a path nor a URL, of an unknown scheme, without the host of its
// server, or with parameters its driver does not take. Errors opening a
// well-formed URL (an unreachable server) do not match it.
var ErrBadURL = errors.New("bad store URL")

// URLError is a store URL that cannot name a store. It matches ErrBadURL.
type URLError struct {
	// URL is the URL as given, with its credentials hidden (see Redact).
	URL string
	// Reason says what is wrong with it.
	Reason string
	// Want names the accepted forms in brief when the value has none of
	// them (not a path nor a URL, an unknown scheme, no host); "" when the
	// form is right and a part of it is wrong.
	Want string
}

func (e *URLError) Error() string {
	s := fmt.Sprintf("%v %q: %s", ErrBadURL, e.URL, e.Reason)
	if e.Want != "" {
		s += "; want " + e.Want
	}
	return s
}

// Is makes a URLError match ErrBadURL.
func (e *URLError) Is(target error) bool { return target == ErrBadURL }

// briefForms names the accepted store forms in a few words; Forms lists
// them all.
const briefForms = "a path (/..., ./..., ~/...) or a URL such as file:///dir, redis://host:6379, postgres://host/db"

// scheme is what a registered URL scheme is and takes.
type scheme struct {
	open  OpenFunc
	forms []string
	// local: the store is in this process or on this host, and its URLs
	// name no server (file, mem): the opener checks their form. Every
	// other scheme names servers: a URL of it must name its host, and an
	// opaque one (redis:host:6379) is refused.
	local bool
	// hostOptional: a network store whose URLs may leave the host out
	// where another part names the server (a MySQL socket, an Azure
	// connection string); its opener checks that one does.
	hostOptional bool
	// hostless: a network store whose URLs never name the server, which
	// comes from the environment (k8s: a kubeconfig, or the pod's
	// service account), so "k8s://" is a whole URL. Implies hostOptional;
	// its opener refuses a host.
	hostless bool
	// credentials are the query parameters whose values are credentials,
	// by exact name (compared without regard to case). The password of
	// the user info always is one.
	credentials []string
	// userIsSecret: a user name without a password is a credential (a
	// NATS token: nats://TOKEN@host).
	userIsSecret bool
}

var (
	mu      sync.RWMutex
	schemes = map[string]scheme{}
)

// Register makes Open accept URLs of scheme, opened by open: a network
// store's, whose URLs must name their host and whose only credential is
// the password of the user info. forms are examples of the accepted
// URLs, shown in help; without them, "scheme://..." is shown. Register
// panics if scheme is registered twice; drivers call it from init.
func Register(name string, open OpenFunc, forms ...string) {
	register(name, scheme{open: open, forms: forms})
}

func register(name string, s scheme) {
	name = strings.ToLower(name)
	mu.Lock()
	defer mu.Unlock()
	if _, dup := schemes[name]; dup {
		panic("storeurl: scheme " + name + " registered twice")
	}
	if len(s.forms) == 0 {
		s.forms = []string{name + "://..."}
	}
	schemes[name] = s
}

func lookup(name string) (scheme, bool) {
	mu.RLock()
	defer mu.RUnlock()
	s, ok := schemes[strings.ToLower(name)]
	return s, ok
}

// Registered reports whether Open accepts URLs of scheme.
func Registered(scheme string) bool {
	_, ok := lookup(scheme)
	return ok
}

// Forms returns examples of every accepted store URL, sorted by scheme,
// with "a plain directory path" for the file store.
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

// badURL is the error of an opener for a URL of its scheme that cannot
// name a store: the URL is shown redacted, and the reason must not repeat
// a credential.
func badURL(u *url.URL, format string, args ...any) error {
	return &URLError{URL: redactURL(u), Reason: fmt.Sprintf(format, args...)}
}

// formError is the error for a value of none of the accepted forms.
func formError(raw, format string, args ...any) error {
	return &URLError{URL: Redact(raw), Reason: fmt.Sprintf(format, args...), Want: briefForms}
}

// error is the error for a URL of scheme s that is not of its form.
func (s scheme) error(raw, format string, args ...any) error {
	return &URLError{URL: Redact(raw), Reason: fmt.Sprintf(format, args...), Want: strings.Fields(s.forms[0])[0]}
}

// Open opens the store raw names (see Parse). Errors for a value that
// cannot name a store match ErrBadURL; no error shows a credential.
func Open(ctx context.Context, raw string) (fence.Driver, io.Closer, error) {
	u, err := Parse(raw)
	if err != nil {
		return nil, nil, err
	}
	s, _ := lookup(u.Scheme)
	drv, closer, err := s.open(ctx, u)
	if err != nil {
		if errors.Is(err, ErrBadURL) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("open store %s: %w", Redact(raw), err)
	}
	return drv, closer, nil
}

// Parse checks that raw names a store, without opening anything, and
// returns its URL: a path (one that starts with /, ./, ../ or ~/, or is
// ., .. or ~) becomes a file URL of the absolute path; anything else must
// be a URL of a registered scheme, and a network store's URL must name
// its host (redis://host:6379, not redis: or redis://, nor the opaque
// redis:host:6379). Anything else is an error matching ErrBadURL, never
// another store.
func Parse(raw string) (*url.URL, error) {
	switch {
	case raw == "":
		return nil, formError(raw, "empty")
	case strings.HasPrefix(raw, "//"):
		return nil, formError(raw, "starts with // (a URL without its scheme?)")
	case isPath(raw):
		p, err := expandPath(raw)
		if err != nil {
			return nil, formError(raw, "%v", err)
		}
		return &url.URL{Scheme: "file", Path: p}, nil
	case strings.HasPrefix(raw, "~"):
		return nil, formError(raw, "~user paths are not expanded; give the directory's full path")
	}
	name, ok := schemeOf(raw)
	if !ok {
		return nil, formError(raw, "neither a path nor a URL")
	}
	s, ok := lookup(name)
	if !ok {
		return nil, formError(raw, "unknown scheme %q", name)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, s.error(raw, "malformed: %s%s", parseReason(err), encodeHint(raw))
	}
	u.Scheme = strings.ToLower(u.Scheme)
	switch {
	case misplacedAt(u):
		return nil, s.error(raw, "'@' after the host%s", encodeHint(raw))
	case u.Fragment != "":
		return nil, s.error(raw, "a store URL has no #fragment%s", encodeHint(raw))
	}
	if _, err := url.ParseQuery(u.RawQuery); err != nil {
		return nil, s.error(raw, "malformed parameters: %s", queryReason(err))
	}
	switch {
	case s.local:
		return u, nil
	case u.Opaque != "":
		return nil, s.error(raw, "no // after %q: %s URLs name their server", u.Scheme+":", u.Scheme)
	case u.Host == "" && !s.hostOptional:
		return nil, s.error(raw, "no host: %s URLs name their server", u.Scheme)
	}
	if u.Host != "" {
		if err := checkHosts(u.Host); err != nil {
			return nil, s.error(raw, "%v", err)
		}
	}
	return u, nil
}

// isPath reports whether raw names a directory rather than a URL.
func isPath(raw string) bool {
	switch raw {
	case ".", "..", "~":
		return true
	}
	for _, p := range []string{"/", "./", "../", "~/"} {
		if strings.HasPrefix(raw, p) {
			return true
		}
	}
	return false
}

// schemeOf returns the scheme raw starts with ("redis" of "redis://h"),
// and whether it has one: letters, digits, +, - and . after a first
// letter, then a colon.
func schemeOf(raw string) (string, bool) {
	i := strings.IndexByte(raw, ':')
	if i <= 0 {
		return "", false
	}
	for j, c := range raw[:i] {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || j > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.')) {
			return "", false
		}
	}
	return strings.ToLower(raw[:i]), true
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

// checkHosts checks a comma-separated host list: each names a host.
func checkHosts(list string) error {
	for _, h := range strings.Split(list, ",") {
		name := h
		if host, _, err := net.SplitHostPort(h); err == nil {
			name = host
		}
		if strings.Trim(name, "[]") == "" {
			if h == "" {
				return errors.New("an empty host in the host list")
			}
			return fmt.Errorf("no host name in %q", h)
		}
	}
	return nil
}

// misplacedAt reports whether an '@' follows the host: in the path, the
// query or the fragment. It is most likely a user name or password with
// an unencoded '/', '?' or '#' in it, cut by the parser where that
// character stands: which part is the secret cannot be told.
func misplacedAt(u *url.URL) bool {
	return strings.Contains(u.EscapedPath(), "@") || strings.Contains(u.RawQuery, "@") ||
		strings.Contains(u.EscapedFragment(), "@")
}

// encodeHint is what to do about a malformed URL that has user info.
func encodeHint(raw string) string {
	if strings.Contains(raw, "@") {
		return " (in a user name or password, write @ / ? # : as %40 %2F %3F %23 %3A)"
	}
	return ""
}

// queryReason says why url.ParseQuery refused a query, without
// repeating any of it.
func queryReason(err error) string {
	var esc url.EscapeError
	if errors.As(err, &esc) {
		return "an invalid %-escape"
	}
	return err.Error() // "invalid semicolon separator in query"
}

// parseReason says why url.Parse refused a URL without repeating any of
// it: its messages quote parts of the URL, which may be cut out of a
// password.
func parseReason(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var esc url.EscapeError
	var host url.InvalidHostError
	switch msg := err.Error(); {
	case errors.As(err, &esc):
		return "an invalid %-escape"
	case errors.As(err, &host):
		return "an invalid character in the host name"
	case strings.HasPrefix(msg, "invalid port"):
		return "an invalid port after the host"
	case strings.Contains(msg, "control character"):
		return "a control character"
	case strings.Contains(msg, "userinfo"):
		return "invalid characters in the user name or password"
	case strings.Contains(msg, "]"), strings.Contains(msg, "IP-literal"):
		return "an invalid IPv6 address (write [addr]:port)"
	default:
		return "not a URL"
	}
}

// nopCloser is the io.Closer of stores that hold nothing open.
type nopCloser struct{}

func (nopCloser) Close() error { return nil }
