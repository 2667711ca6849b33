package torture

import (
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence/cmd/internal/storeurl"
	"github.com/fencing/fence/internal/testkit/testserver"
)

// Store is a store under torture, opened once for any number of plans.
type Store struct {
	// Name names the store in the summary: the kind ("redis") for a
	// private server, the redacted URL otherwise.
	Name string
	// addrs are the store's server addresses, each of which gets a proxy
	// per worker; none for a store without a network (file).
	addrs []string
	// unproxied, if set, says why the store's network cannot go through
	// the fault proxy although it has one.
	unproxied string
	// url returns the store URL with the given addresses (the proxies') in
	// place of addrs, for leases of ttl.
	url func(addrs []string, ttl time.Duration) string
	// restart, if set, kills the store's server (or one member), keeps it
	// down for down, and starts it again; it calls started once the
	// server is down, and returns a description of what it did.
	restart func(down time.Duration, started func(what string)) (string, error)
	close   func()
	// minTTL is the shortest lease the store grants (Azure's 15 s); plans
	// on it run with at least this TTL, and long enough for a fault.
	minTTL time.Duration
	// hold, if set, bounds how long the store may keep the lease of a
	// holder gone silent, for leases of ttl (when it rounds TTLs up or
	// keeps sessions longer); nil means ttl.
	hold func(ttl time.Duration) time.Duration
}

// holdTime is how long the store may keep a silent holder's lease.
func (s *Store) holdTime(ttl time.Duration) time.Duration {
	if s.hold == nil {
		return ttl
	}
	return max(ttl, s.hold(ttl))
}

// MinTTL returns the shortest lease TTL the store grants, 0 if any.
func (s *Store) MinTTL() time.Duration { return s.minTTL }

// Close stops the servers the store started.
func (s *Store) Close() {
	if s.close != nil {
		s.close()
	}
}

func (s *Store) notApplicable(f Fault) string {
	switch f {
	case FaultBlackhole, FaultDelay:
		if s.unproxied != "" {
			return s.unproxied
		}
		if len(s.addrs) == 0 {
			return "no network between the workers and this store"
		}
	case FaultRestart:
		if s.restart == nil {
			return "the tool can restart only servers it started"
		}
	}
	return ""
}

// kind is a store the tool can set up itself: a private server from
// internal/testkit/testserver, or one that needs no server.
type kind struct {
	about  string
	scheme string // the driver's URL scheme; "" for the tool's own
	open   func(env *testserver.Env) (*Store, error)
	// sessionBound: the lock lives as long as the holder's connection or
	// process, so a paused holder keeps it.
	sessionBound bool
}

var kinds = map[string]kind{
	"file": {about: "lock files in a new temporary directory (fencefile)", scheme: "file", open: openFileStore, sessionBound: true},
	"mem":  {about: "a fencemem store in the parent, served to the workers over HTTP", open: openMemStore},
}

// Kinds lists the store names OpenStore sets up itself, with what each is.
// Kinds whose driver is not in this build are left out.
func Kinds() [][2]string {
	var out [][2]string
	for name, k := range kinds {
		if k.builtIn() {
			out = append(out, [2]string{name, k.about})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// KindNames lists the names of Kinds.
func KindNames() []string {
	var names []string
	for _, k := range Kinds() {
		names = append(names, k[0])
	}
	return names
}

// OpenStore sets up the store spec names: a kind ("file", "mem", "redis",
// ...), which the tool starts privately through env, or a store URL of a
// running store.
func OpenStore(spec string, env *testserver.Env) (*Store, error) {
	if k, ok := kinds[spec]; ok {
		if !k.builtIn() {
			return nil, fmt.Errorf("store %q: its driver (URL scheme %s) is not in this build", spec, k.scheme)
		}
		s, err := k.open(env)
		if err != nil {
			return nil, fmt.Errorf("starting a private %s store: %w", spec, err)
		}
		if s.Name == "" {
			s.Name = spec
		}
		return s, nil
	}
	if !strings.Contains(spec, ":") && !strings.HasPrefix(spec, "/") {
		return nil, fmt.Errorf("unknown store %q: name one of %s, or give a store URL", spec, strings.Join(KindNames(), ", "))
	}
	u, err := storeurl.Parse(spec)
	if err != nil {
		return nil, err
	}
	s := &Store{Name: storeurl.Redact(spec), url: func([]string, time.Duration) string { return spec }}
	if u.Host != "" && u.Scheme != "file" {
		s.addrs = strings.Split(u.Host, ",")
		s.url = func(addrs []string, _ time.Duration) string {
			v := *u
			v.Host = strings.Join(addrs, ",")
			return v.String()
		}
	}
	return s, nil
}

func openFileStore(*testserver.Env) (*Store, error) {
	dir, err := os.MkdirTemp("", "fence-torture-file-")
	if err != nil {
		return nil, err
	}
	u := (&url.URL{Scheme: "file", Path: dir}).String()
	return &Store{
		url:   func([]string, time.Duration) string { return u },
		close: func() { _ = os.RemoveAll(dir) },
	}, nil
}

func openMemStore(*testserver.Env) (*Store, error) {
	srv, err := newMemServer()
	if err != nil {
		return nil, err
	}
	return &Store{
		addrs: []string{srv.Addr()},
		url:   func(addrs []string, _ time.Duration) string { return MemScheme + "://" + addrs[0] },
		close: func() { _ = srv.Close() },
	}, nil
}

// restartProcess returns a Store.restart for one private server.
func restartProcess(env *testserver.Env, name string, p *testserver.Process) func(time.Duration, func(string)) (string, error) {
	return func(down time.Duration, started func(string)) (string, error) {
		p.Kill()
		started(fmt.Sprintf("kill %s (SIGKILL), down for %v", name, down))
		time.Sleep(down)
		if err := env.Do(func(testing.TB) { p.Restart() }); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s restarted", name), nil
	}
}
