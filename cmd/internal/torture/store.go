package torture

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fencing/fence"
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
	// failover, if set, is the restart fault of a store that replicates
	// asynchronously and promotes a replica when its primary dies: like
	// restart, but when it kills a primary it calls lost instead of
	// started, for the primary may have acknowledged what its replicas
	// never received (see crashOverlap). restartFor is how long such an
	// episode may take (the failure noticed, a replica promoted, the
	// killed server back as a replica): a restart plan runs long enough
	// for one, and for work after it.
	failover   func(down time.Duration, started, lost func(what string)) (string, error)
	restartFor time.Duration
	// empty are the server processes an empty restart kills and brings
	// back with their saved empty data directories, in start order;
	// emptyOne: one of them per episode, in turn (a cluster member).
	empty    []*testserver.Process
	emptyOne bool
	// emptyBare saves the data directories before the store is set up:
	// for a store whose setup is data a real loss takes with it (a NATS
	// bucket, whose stream sequence is the token), so that the restart
	// is empty and not a rollback to the setup.
	emptyBare bool
	emptyN    int
	emptyName string
	// emptyAtOnce, if set, is the empty restart of a store whose servers
	// keep nothing on disk, so that any restart is empty: it kills a
	// server (or one member), calls lost, and starts it again at once on
	// its own directory, which keeps what the server is (its role, its
	// cluster configuration) and no data. empty is not used then.
	emptyAtOnce func(lost func(what string)) (string, error)
	// emptyTTL is the TTL a restart-empty plan needs for the server to be
	// back within a holder's validity: a few times its start time.
	emptyTTL time.Duration
	// emptyNA, if set, says why the store cannot be restarted empty.
	emptyNA string
	// emptyMember, if set, is the empty restart of a cluster whose
	// members keep the store's state for one that lost its own: it brings
	// one member back empty (as an operator would) and says what it did;
	// it calls started once the member is down. The store loses nothing.
	emptyMember func(started func(what string)) (string, error)
	// emptyDown is how long an emptied server stays down at least. Stores
	// whose tokens are seeded from the service's clock at a second's
	// resolution (Azure Table, DynamoDB) promise increasing tokens only
	// if what is lost was issued before the clock's current second
	// (docs/aztable.md, docs/dynamodb.md): a waiter that waits through
	// the outage and is granted the key within that second would get a
	// token already issued. The plan keeps to the store's promise; the
	// docs say what happens outside it.
	emptyDown time.Duration
	// wipe, if set, removes the store's own state behind fence's back and
	// says what it removed.
	wipe  func(ctx context.Context) (string, error)
	close func()
	// clock, if set, is the fake wall clocks the store's servers run on
	// (the clock-jump plan); clockNA says why there is none.
	clock   *storeClock
	clockNA string
	// partition, if set, cuts one member of the cluster from its peers
	// (its clients still reach it) and says what it did, which member
	// (an index of addrs) and how to heal. A store whose cut-off side
	// goes on taking writes that the majority never sees (a Redis
	// master) calls lost at the moment they are gone for good;
	// partitionNA says why there is none, and partitionMissing that the
	// reason is a facility this machine lacks (network namespaces).
	partition        partitionFunc
	partitionNA      string
	partitionMissing bool
	// grantWithin, if set, is how soon after a restart or partition
	// episode begins (a member killed or cut off) the store must grant a
	// lease again: its failure detection and election, and a lease's
	// expiry, with room for a loaded machine (checkGrants).
	grantWithin time.Duration
	// partitionFor is how long a partition lasts at least: long enough for
	// the cluster to see a member gone and elect another leader.
	partitionFor time.Duration
	// minTTL is the shortest lease the store grants (Azure's 15 s); plans
	// on it run with at least this TTL, and long enough for a fault.
	minTTL time.Duration
	// hold, if set, bounds how long the store may keep the lease of a
	// holder gone silent, for leases of ttl (when it rounds TTLs up or
	// keeps sessions longer); nil means ttl.
	hold func(ttl time.Duration) time.Duration

	kindsMu sync.Mutex
	// unsupported says, per lease kind asked about, why the store's
	// driver cannot acquire it ("" if it can).
	unsupported map[LeaseKind]string
}

// supports says why the store's driver cannot acquire what a plan of k
// takes, or "" if it can. It asks the driver (fence.KindSupporter) once
// per kind: a worker would only fail with ErrUnsupported.
func (s *Store) supports(ctx context.Context, k LeaseKind) (string, error) {
	if k == KindLock {
		return "", nil
	}
	s.kindsMu.Lock()
	defer s.kindsMu.Unlock()
	if why, ok := s.unsupported[k]; ok {
		return why, nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	drv, closer, err := storeurl.Open(ctx, s.url(s.addrs, max(time.Second, s.minTTL)))
	if err != nil {
		return "", fmt.Errorf("asking the store what it supports: %w", err)
	}
	closer.Close()
	why := ""
	ks, _ := drv.(fence.KindSupporter)
	for _, fk := range k.fenceKinds() {
		if ks == nil || !ks.Supports(fk) {
			why = fmt.Sprintf("the store's driver does not do %s leases", fk)
			break
		}
	}
	if s.unsupported == nil {
		s.unsupported = map[LeaseKind]string{}
	}
	s.unsupported[k] = why
	return why, nil
}

// holdTime is how long the store may keep a silent holder's lease.
func (s *Store) holdTime(ttl time.Duration) time.Duration {
	if s.hold == nil {
		return ttl
	}
	return max(ttl, s.hold(ttl))
}

// cutTime is how long a pause or a partition lasts for leases of ttl:
// past the time the store may keep a silent holder's lease, and a TTL
// more for another worker to take it; a partition at least partitionFor.
func (s *Store) cutTime(f Fault, ttl time.Duration) time.Duration {
	d := s.holdTime(ttl) + ttl
	if f == FaultPartition {
		d = max(d, s.partitionFor)
	}
	return d
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
		if s.restart == nil && s.failover == nil {
			return "the tool can restart only servers it started"
		}
	case FaultWipe:
		if s.wipe == nil {
			return "the tool cannot wipe this store's state"
		}
	case FaultRestartEmpty:
		if s.emptyMember != nil {
			return ""
		}
		if s.emptyNA != "" {
			return s.emptyNA
		}
		if len(s.empty) == 0 && s.emptyAtOnce == nil {
			return "the tool can empty only servers it started"
		}
	case FaultClockJump:
		if s.clock == nil {
			if s.clockNA != "" {
				return s.clockNA
			}
			return "no server on a fake clock: the store has no server (its clock is this machine's), or its server is a Go program the tool does not build (Debian's etcd, kube-apiserver), which reads the clock through the kernel's vDSO, out of the fake clock's reach"
		}
	case FaultPartition:
		if s.partition == nil {
			if s.partitionNA != "" {
				return s.partitionNA
			}
			return "not a cluster the tool started on test hosts of their own"
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
	// cluster: several servers that replicate the store's state (a
	// replicated cluster, an ensemble, a master with replicas).
	cluster bool
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
		wipe:  wipeDir(dir),
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
		wipe:  srv.wipe,
		close: func() { _ = srv.Close() },
	}, nil
}

// maxEmptyTTL caps the TTL of a restart-empty plan: a server slower to
// start than a third of it comes back after its holders' leases ran out,
// and the plan shows what a plain restart shows. Tests lower it for CI's
// short schedule.
var maxEmptyTTL = 5 * time.Second

// saveEmpty prepares the store for empty restarts: it sets the store up
// once (tables, bucket: what an operator creates before fence runs), then
// saves each server's data directory as its empty state.
func (s *Store) saveEmpty(name string, ps ...*testserver.Process) error {
	if !s.emptyBare {
		if err := s.setUp(); err != nil {
			return err
		}
	}
	var start time.Duration
	for _, p := range ps {
		d, err := p.SaveEmpty()
		if err != nil {
			return err
		}
		if s.emptyOne {
			start = max(start, d)
		} else {
			start += d
		}
	}
	s.empty, s.emptyName = ps, name
	s.emptyTTL = min(maxEmptyTTL, (3 * start).Round(100*time.Millisecond))
	if s.emptyBare {
		return s.setUp()
	}
	return nil
}

// setUp makes the store ready for workers: one acquisition and release,
// which creates what the driver creates on first use.
func (s *Store) setUp() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ttl := max(time.Second, s.minTTL)
	drv, closer, err := storeurl.Open(ctx, s.url(s.addrs, ttl))
	if err != nil {
		return fmt.Errorf("setting the store up: %w", err)
	}
	c, err := drv.TryAcquire(ctx, fence.Request{Key: "torture/setup", Owner: "torture-setup", TTL: ttl})
	if err == nil {
		err = c.Release(ctx)
	}
	closer.Close()
	if err != nil {
		return fmt.Errorf("setting the store up: %w", err)
	}
	return nil
}

// saveEmptyOne is saveEmpty for a cluster whose members an empty restart
// empties one at a time.
func (s *Store) saveEmptyOne(name string, ps ...*testserver.Process) error {
	s.emptyOne = true
	return s.saveEmpty(name, ps...)
}

// restartEmpty kills the store's servers (or one member), puts back their
// empty data directories and starts them again at once.
func (s *Store) restartEmpty(lost func(what string)) (string, error) {
	if s.emptyAtOnce != nil {
		return s.emptyAtOnce(lost)
	}
	ps, name := s.empty, s.emptyName
	if s.emptyOne {
		i := s.emptyN % len(ps)
		s.emptyN++
		ps = ps[i : i+1]
		name = fmt.Sprintf("%s %d of %d", name, i+1, len(s.empty))
	}
	for i := len(ps) - 1; i >= 0; i-- {
		if err := ps[i].EmptyDir(); err != nil {
			return "", err
		}
	}
	lost(fmt.Sprintf("kill %s (SIGKILL) and empty its data", name))
	time.Sleep(s.emptyDown)
	start := time.Now()
	for _, p := range ps {
		if err := p.Start(); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("back empty after %v", time.Since(start).Round(time.Millisecond)), nil
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
