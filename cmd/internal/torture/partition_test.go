package torture

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// fakeNet is a cutter that cuts nothing unless told to move the lead.
type fakeNet struct {
	leader   int
	moveLead bool // Isolate(leader) makes another member lead, as a real cut does
	cut      int
}

func (f *fakeNet) Isolate(i int) error {
	f.cut = i
	if f.moveLead && i == f.leader {
		f.leader = (i + 2) % 3 // m1 -> m0
	}
	return nil
}

func (f *fakeNet) Heal() error { return nil }

// shortAlone makes awaitAlone give up at once, for a test of a cut that
// does not bite.
func shortAlone(t *testing.T) {
	old := aloneWithin
	aloneWithin = 0
	t.Cleanup(func() { aloneWithin = old })
}

// TestPartitionMustBite: a partition whose leader goes on leading (a cut
// that cut nothing) fails the episode at its heal; one that moved the lead
// passes, and the next episode cuts a follower, which fails at its heal
// if the follower still has a leader.
func TestPartitionMustBite(t *testing.T) {
	shortAlone(t)
	names := []string{"m0", "m1", "m2"}
	for _, c := range []struct {
		moveLead, followerAlone bool
		want                    string
	}{
		{false, true, "did not bite: leader m1"},
		{true, true, ""},
		{true, false, "did not bite: follower m1, cut off from its peers, still has a leader"},
	} {
		f := &fakeNet{leader: 1, moveLead: c.moveLead}
		alone := func(i int) error {
			if !c.followerAlone || i != f.cut {
				return errors.New("it names a leader")
			}
			return nil
		}
		part := partitionMember(f, names, func() (int, error) { return f.leader, nil }, alone)
		desc, member, heal, err := part(nil)
		if err != nil || !strings.Contains(desc, "leader m1") || f.cut != 1 || member != 1 {
			t.Fatalf("first episode: %q, %v, cut %d; want the leader m1 cut", desc, err, f.cut)
		}
		err = heal()
		if c.moveLead {
			if err != nil {
				t.Fatalf("a partition that moved the lead: heal = %v", err)
			}
			desc, member, heal, err := part(nil)
			if err != nil || !strings.Contains(desc, "follower m1") || member != 1 {
				t.Fatalf("second episode: %q, %v; want the follower m1 (after leader m0) cut", desc, err)
			}
			switch err := heal(); {
			case c.want == "" && err != nil:
				t.Fatalf("a follower that lost its leader: heal = %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("a follower that kept its leader: heal = %v; want %q", err, c.want)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("a partition that cut nothing: heal = %v; want %q", err, c.want)
		}
	}
}

// TestPartitionMasterMustBite: a Redis master cut off whose majority
// promotes no replica fails the episode at its heal; one that promotes
// marks the loss of what the cut-off master took (at the promotion where
// it stops taking writes, after the heal's demotion where it does not),
// and the next episode cuts a replica, whose heal marks no loss.
func TestPartitionMasterMustBite(t *testing.T) {
	shortAlone(t)
	for _, c := range []struct {
		promote, minorityWrites, replicates bool
		want                                string
	}{
		{false, false, false, "did not bite"},
		{true, false, false, ""},
		{true, true, false, ""},
		{true, false, true, "did not bite: redis master replica r2, cut off from its peers, still replicates"},
	} {
		f := &fakeNet{leader: 1}
		var steps []string
		mc := masterCut{
			what:    "redis master",
			names:   []string{"r0", "r1", "r2"},
			master:  func() (int, error) { return f.leader, nil },
			replica: func(m int) (int, error) { return (m + 1) % 3, nil },
			promoted: func(old int) (int, error) {
				if !c.promote {
					return 0, errors.New("no failover")
				}
				steps = append(steps, "promoted")
				return 2, nil
			},
			ready:          func() error { steps = append(steps, "ready"); return nil },
			minorityWrites: c.minorityWrites,
			alone: func(int) error {
				if c.replicates {
					return errors.New("its replication link is up")
				}
				return nil
			},
		}
		part := partitionMaster(f, mc)
		lost := func(string) { steps = append(steps, "lost") }
		desc, member, heal, err := part(lost)
		if err != nil || !strings.Contains(desc, "redis master r1") || f.cut != 1 || member != 1 {
			t.Fatalf("first episode: %q, %v, cut %d; want the master r1 cut", desc, err, f.cut)
		}
		err = heal()
		if !c.promote {
			if err == nil || !strings.Contains(err.Error(), c.want) || slices.Contains(steps, "lost") {
				t.Fatalf("a cut that promoted nothing: heal = %v, steps %v; want %q and no loss", err, steps, c.want)
			}
			continue
		}
		want := []string{"promoted", "lost", "ready"}
		if c.minorityWrites {
			want = []string{"promoted", "ready", "lost"}
		}
		if err != nil || !slices.Equal(steps, want) {
			t.Fatalf("minority writes %v: heal = %v, steps %v; want %v", c.minorityWrites, err, steps, want)
		}
		steps = nil
		desc, member, heal, err = part(lost)
		if err != nil || !strings.Contains(desc, "replica r2") || member != 2 {
			t.Fatalf("second episode: %q, %v; want the replica r2 cut", desc, err)
		}
		err = heal()
		if slices.Contains(steps, "lost") {
			t.Fatalf("second episode: steps %v; want no loss", steps)
		}
		switch {
		case !c.replicates && err != nil:
			t.Fatalf("a replica cut off from its master: heal = %v", err)
		case c.replicates && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Fatalf("a replica that still replicates: heal = %v; want %q", err, c.want)
		}
	}
}

// TestPGCutMustBite: a PostgreSQL pair whose primary still commits with
// its standby cut off fails the episode at its heal, as does a primary
// the tool cannot ask; one whose commits wait heals once the standby
// streams again.
func TestPGCutMustBite(t *testing.T) {
	for _, c := range []struct {
		committed bool
		err       error
		want      string
	}{
		{true, nil, "did not bite"},
		{false, errors.New("connection refused"), "connection refused"},
		{false, nil, ""},
	} {
		f := &fakeNet{}
		streamed := false
		part := pgCut(f, func() int { return 1 }, func() (bool, error) { return c.committed, c.err },
			func() error { streamed = true; return nil })
		desc, member, heal, err := part(nil)
		if err != nil || f.cut != 1 || member != 1 || !strings.Contains(desc, "primary (node 1)") {
			t.Fatalf("cut: %q, %v, cut %d; want the primary, node 1", desc, err, f.cut)
		}
		err = heal()
		if c.want == "" {
			if err != nil || !streamed {
				t.Fatalf("a cut that bit: heal = %v, streaming waited for %v", err, streamed)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("heal = %v; want %q", err, c.want)
		}
	}
}
