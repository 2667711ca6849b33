package torture

import (
	"errors"
	"fmt"
	"time"

	"github.com/fencing/fence/internal/testkit/testserver"
)

// storeClock is what the clock-jump plan moves: the fake wall clocks of a
// store's servers. With one clock, every server is on it and every jump
// moves them all. With a clock per member (Redlock), the episodes take
// turns: all members together, then one member alone, each in turn, as
// one server's wrong NTP step would.
type storeClock struct {
	clocks  []*testserver.FakeClock // the shared clock, or one a member
	names   []string                // the members', for one clock each
	episode int
	moved   []*testserver.FakeClock // what the last forward moved
}

// oneClock is the storeClock of servers sharing c; nil if c is.
func oneClock(c *testserver.FakeClock) *storeClock {
	if c == nil {
		return nil
	}
	return &storeClock{clocks: []*testserver.FakeClock{c}}
}

// memberClocks is the storeClock of members on a clock each (named as
// names says); nil if any is nil.
func memberClocks(cs []*testserver.FakeClock, names []string) *storeClock {
	for _, c := range cs {
		if c == nil {
			return nil
		}
	}
	return &storeClock{clocks: cs, names: names}
}

// forward moves this episode's clocks d forward and says whose they are.
func (c *storeClock) forward(d time.Duration) (string, error) {
	if c.moved != nil {
		return "", errors.New("a clock jump forward before the last one went back")
	}
	what := "the store's clock"
	c.moved = c.clocks
	if len(c.clocks) > 1 {
		if turn := c.episode % (len(c.clocks) + 1); turn > 0 {
			c.moved = c.clocks[turn-1 : turn]
			what = fmt.Sprintf("the clock of member %s alone", c.names[turn-1])
		} else {
			what = "every member's clock"
		}
	}
	c.episode++
	for i, k := range c.moved {
		if err := k.Jump(d); err != nil {
			c.undo(c.moved[:i], d)
			c.moved = nil
			return "", err
		}
	}
	return what, nil
}

// back moves the clocks the last forward moved by d back.
func (c *storeClock) back(d time.Duration) error {
	err := c.undo(c.moved, d)
	c.moved = nil
	return err
}

func (c *storeClock) undo(ks []*testserver.FakeClock, d time.Duration) error {
	var errs []error
	for _, k := range ks {
		errs = append(errs, k.Jump(-d))
	}
	return errors.Join(errs...)
}

// reset puts every clock back at the real time, for a plan cut short
// between a jump and its return.
func (c *storeClock) reset() {
	for _, k := range c.clocks {
		if off := k.Offset(); off != 0 {
			_ = k.Jump(-off)
		}
	}
	c.moved = nil
}
