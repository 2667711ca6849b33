package torture

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testkit/testserver"
)

// onNet makes the test hosts a cluster of n members runs on, so that the
// partition fault can cut them apart. Where the machine has no network
// namespaces (not root, no ip program) it returns nil and says why: the
// cluster then runs on loopback and the partition plan is not applicable
// (a failure under FENCE_TEST_STRICT=1, see TestTorture).
func onNet(env *testserver.Env, n int) (*testserver.Net, string, error) {
	var nt *testserver.Net
	err := env.Do(func(tb testing.TB) { nt = testserver.NewNet(tb, n) })
	switch {
	case errors.Is(err, testserver.ErrUnavailable):
		return nil, err.Error(), nil
	case err != nil:
		return nil, "", err
	}
	return nt, "", nil
}

// netOpts starts a cluster on nt, if there is one.
func netOpts(nt *testserver.Net) []testserver.Option {
	if nt == nil {
		return nil
	}
	return []testserver.Option{testserver.OnNet(nt)}
}

// partitionMember returns a cluster's Store.partition: it cuts the member
// leader names (of names, one per host of nt) from the others, then a
// follower, in turn, and returns which member it cut. Its heal first
// checks that the fault bit: a leader cut off for the episode must have
// been replaced by one the majority elected (a partition that cut nothing
// would leave it leading); a follower cut off must not have taken the
// lead, and must itself have lost its leader (alone says so, asking the
// member through its client address, which the cut leaves open).
func partitionMember(nt cutter, names []string, leader func() (int, error), alone func(i int) error) func(func(string)) (string, int, func() error, error) {
	next := leaderThenFollower(len(names), leader)
	return func(func(string)) (string, int, func() error, error) {
		i, role, err := next()
		if err != nil {
			return "", 0, nil, err
		}
		if err := nt.Isolate(i); err != nil {
			return "", 0, nil, err
		}
		heal := func() error {
			var aerr error
			if role == "follower" {
				aerr = awaitAlone(func() error { return alone(i) })
			}
			now, lerr := awaitLeader(leader)
			herr := nt.Heal()
			switch {
			case lerr != nil:
				return errors.Join(fmt.Errorf("the majority has no leader at the end of the partition: %w", lerr), herr)
			case now == i:
				return errors.Join(fmt.Errorf("the partition did not bite: %s %s, cut off from its peers, still leads", role, names[i]), herr)
			case aerr != nil:
				return errors.Join(fmt.Errorf("the partition did not bite: %s %s, cut off from its peers, still has a leader: %w", role, names[i], aerr), herr)
			}
			return herr
		}
		return fmt.Sprintf("cut %s %s from its peers (its clients still reach it)", role, names[i]), i, heal, nil
	}
}

// awaitAlone asks alone until it says the member cut off has lost its
// peers (nil), for up to aloneWithin: the partition has lasted the
// cluster's election time by then, but a member may take a moment more to
// give up its leader.
func awaitAlone(alone func() error) error {
	deadline := time.Now().Add(aloneWithin)
	for {
		err := alone()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// aloneWithin is awaitAlone's patience (a variable for the tests of a
// cut that does not bite, which run before the parallel ones).
var aloneWithin = 5 * time.Second

// cutter cuts a cluster's members apart: a testserver.Net.
type cutter interface {
	Isolate(i int) error
	Heal() error
}

// setNet gives s the partition fault of a cluster on nt, or says why it
// has none (why, from onNet). A partition lasts at least elect: the time
// the cluster takes to see its leader gone and elect another.
func (s *Store) setNet(nt *testserver.Net, why string, names []string, leader func() (int, error), alone func(int) error, elect time.Duration) {
	s.setPartition(nt, why, func() partitionFunc { return partitionMember(nt, names, leader, alone) }, elect)
}

// partitionFunc is Store.partition.
type partitionFunc = func(lost func(what string)) (what string, member int, heal func() error, err error)

// setPartition gives s the partition fault that part makes, lasting at
// least d, if there are test hosts (nt); or says why there is none (why,
// from onNet), a facility this machine lacks.
func (s *Store) setPartition(nt *testserver.Net, why string, part func() partitionFunc, d time.Duration) {
	if nt == nil {
		s.partition, s.partitionNA, s.partitionMissing = nil, "no test hosts: "+why, true
		return
	}
	s.partition, s.partitionNA, s.partitionFor = part(), "", d
}

// masterCut is how partitionMaster cuts a Redis deployment whose data
// servers run one per host of a net: a master with replicas that a
// majority (of Sentinels, of Cluster masters) fails over.
type masterCut struct {
	what  string   // "redis master", for messages
	names []string // the data servers, host i's first
	// master returns the master to cut: the one the plan's lease is on.
	master func() (int, error)
	// replica returns a replica of master i, to cut in turn.
	replica func(master int) (int, error)
	// promoted waits until the majority has promoted a replica in place
	// of the cut-off master old, and returns it; an error if it does not
	// within its wait.
	promoted func(old int) (int, error)
	// ready waits, after the heal, until the deployment is whole again.
	ready func() error
	// alone says whether data server i has lost its master: nil when its
	// replication link is down (asked through its client address).
	alone func(i int) error
	// minorityWrites says the cut-off master takes writes until, after
	// the heal, it is turned into a replica (Sentinel); otherwise it
	// refuses them once the majority may promote (Redis Cluster).
	minorityWrites bool
}

// partitionMaster returns the Store.partition of a Redis deployment: it
// cuts the master the plan's lease is on from its peers, then one of its
// replicas, in turn. A cut master's heal first checks that the majority
// promoted a replica in its place (a partition that cut nothing leaves
// no new master): the cut-off master is then one of two, and what it
// took meanwhile is lost (called lost) when it stops taking writes for
// good.
func partitionMaster(nt cutter, mc masterCut) func(lost func(string)) (string, int, func() error, error) {
	episode := 0
	return func(lost func(string)) (string, int, func() error, error) {
		m, err := mc.master()
		if err != nil {
			return "", 0, nil, err
		}
		episode++
		if episode%2 == 0 {
			r, err := mc.replica(m)
			if err != nil {
				return "", 0, nil, err
			}
			if err := nt.Isolate(r); err != nil {
				return "", 0, nil, err
			}
			heal := func() error {
				aerr := awaitAlone(func() error { return mc.alone(r) })
				if err := nt.Heal(); err != nil {
					return err
				}
				if aerr != nil {
					return fmt.Errorf("the partition did not bite: %s replica %s, cut off from its peers, still replicates: %w", mc.what, mc.names[r], aerr)
				}
				return mc.ready()
			}
			return fmt.Sprintf("cut %s replica %s from its peers (its clients still reach it)", mc.what, mc.names[r]), r, heal, nil
		}
		if err := nt.Isolate(m); err != nil {
			return "", 0, nil, err
		}
		type promotion struct {
			i   int
			err error
		}
		done := make(chan promotion, 1)
		go func() {
			p, err := mc.promoted(m)
			if err == nil && !mc.minorityWrites {
				lost(fmt.Sprintf("%s promoted in place of the cut-off %s, which refuses writes by now: what it took after the cut is lost", mc.names[p], mc.names[m]))
			}
			done <- promotion{p, err}
		}()
		heal := func() error {
			p := <-done
			herr := nt.Heal()
			if p.err != nil {
				return errors.Join(fmt.Errorf("the partition did not bite: no replica promoted in place of the cut-off %s %s: %w", mc.what, mc.names[m], p.err), herr)
			}
			if herr != nil {
				return herr
			}
			if err := mc.ready(); err != nil {
				return err
			}
			if mc.minorityWrites {
				lost(fmt.Sprintf("%s, cut off and a master beside %s, turned into its replica: what it took while cut off is lost", mc.names[m], mc.names[p.i]))
			}
			return nil
		}
		return fmt.Sprintf("cut %s %s from its peers (its clients still reach it)", mc.what, mc.names[m]), m, heal, nil
	}
}
