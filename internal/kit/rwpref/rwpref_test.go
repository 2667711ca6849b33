package rwpref

import (
	"testing"
	"time"
)

func TestDecide(t *testing.T) {
	for _, c := range []struct {
		write bool
		l     Lock
		want  Step
	}{
		{false, Lock{}, Grant},
		{false, Lock{Readers: true}, Grant},
		{false, Lock{Writer: true}, Refuse},
		{false, Lock{WriterWaits: true}, Refuse},
		{false, Lock{Readers: true, WriterWaits: true}, Refuse},
		{true, Lock{}, Grant},
		{true, Lock{WriterWaits: true}, Grant},
		{true, Lock{Readers: true}, Intend},
		{true, Lock{Writer: true}, Intend},
		{true, Lock{Readers: true, WriterWaits: true}, Intend},
	} {
		if got := Decide(c.write, c.l); got != c.want {
			t.Errorf("Decide(write %v, %+v) = %d; want %d", c.write, c.l, got, c.want)
		}
	}
}

func TestIntent(t *testing.T) {
	if Intent(time.Millisecond) != MinIntent || Intent(time.Minute) != time.Minute {
		t.Errorf("Intent(1ms) = %v, Intent(1m) = %v", Intent(time.Millisecond), Intent(time.Minute))
	}
}

func TestWaitsFor(t *testing.T) {
	q := "rwrwrrw" // r: reader, w: writer
	want := []int{-1, 0, 1, 2, 3, 3, 5}
	for i := range q {
		if got := WaitsFor(i, func(j int) bool { return q[j] == 'r' }); got != want[i] {
			t.Errorf("WaitsFor(%d) in %s = %d; want %d", i, q, got, want[i])
		}
	}
}
