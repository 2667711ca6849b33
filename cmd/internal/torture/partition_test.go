package torture

import (
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

// TestPartitionMustBite: a partition whose leader goes on leading (a cut
// that cut nothing) fails the episode at its heal; one that moved the lead
// passes, and the next episode cuts a follower.
func TestPartitionMustBite(t *testing.T) {
	names := []string{"m0", "m1", "m2"}
	for _, c := range []struct {
		moveLead bool
		want     string
	}{
		{false, "did not bite: leader m1"},
		{true, ""},
	} {
		f := &fakeNet{leader: 1, moveLead: c.moveLead}
		part := partitionMember(f, names, func() (int, error) { return f.leader, nil })
		desc, member, heal, err := part()
		if err != nil || !strings.Contains(desc, "leader m1") || f.cut != 1 || member != 1 {
			t.Fatalf("first episode: %q, %v, cut %d; want the leader m1 cut", desc, err, f.cut)
		}
		err = heal()
		if c.want == "" {
			if err != nil {
				t.Fatalf("a partition that moved the lead: heal = %v", err)
			}
			desc, member, heal, err := part()
			if err != nil || !strings.Contains(desc, "follower m1") || member != 1 || heal() != nil {
				t.Fatalf("second episode: %q, %v; want the follower m1 (after leader m0) cut", desc, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("a partition that cut nothing: heal = %v; want %q", err, c.want)
		}
	}
}
