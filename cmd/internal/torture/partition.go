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
// follower, in turn, and returns which member it cut. Its heal first checks that the fault bit: a leader
// cut off for the episode must have been replaced by one the majority
// elected (a partition that cut nothing would leave it leading), and a
// follower cut off must not have taken the lead.
func partitionMember(nt cutter, names []string, leader func() (int, error)) func() (string, int, func() error, error) {
	next := leaderThenFollower(len(names), leader)
	return func() (string, int, func() error, error) {
		i, role, err := next()
		if err != nil {
			return "", 0, nil, err
		}
		if err := nt.Isolate(i); err != nil {
			return "", 0, nil, err
		}
		heal := func() error {
			now, lerr := awaitLeader(leader)
			herr := nt.Heal()
			switch {
			case lerr != nil:
				return errors.Join(fmt.Errorf("the majority has no leader at the end of the partition: %w", lerr), herr)
			case now == i:
				return errors.Join(fmt.Errorf("the partition did not bite: %s %s, cut off from its peers, still leads", role, names[i]), herr)
			}
			return herr
		}
		return fmt.Sprintf("cut %s %s from its peers (its clients still reach it)", role, names[i]), i, heal, nil
	}
}

// cutter cuts a cluster's members apart: a testserver.Net.
type cutter interface {
	Isolate(i int) error
	Heal() error
}

// setNet gives s the partition fault of a cluster on nt, or says why it
// has none (why, from onNet). A partition lasts at least elect: the time
// the cluster takes to see its leader gone and elect another.
func (s *Store) setNet(nt *testserver.Net, why string, names []string, leader func() (int, error), elect time.Duration) {
	if nt == nil {
		s.partitionNA, s.partitionMissing = "no test hosts: "+why, true
		return
	}
	s.partition = partitionMember(nt, names, leader)
	s.partitionFor = elect
}
