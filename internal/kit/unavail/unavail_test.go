package unavail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/fencing/fence"
)

var errLoading = errors.New("LOADING the dataset")

func TestMark(t *testing.T) {
	store := func(err error) bool { return errors.Is(err, errLoading) }
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), true},
		{"eof", fmt.Errorf("reading the reply: %w", io.EOF), true},
		{"store's own", fmt.Errorf("fenceredis: %w", errLoading), true},
		{"closed by its user", fmt.Errorf("write: %w", net.ErrClosed), false},
		{"held", &fence.HeldError{Key: "k"}, false},
		{"caller's deadline", context.DeadlineExceeded, false},
		{"other", errors.New("WRONGTYPE"), false},
	} {
		got := Mark(c.err, store)
		if errors.Is(got, fence.ErrUnavailable) != c.want {
			t.Errorf("%s: Mark(%v) matches ErrUnavailable: %v; want %v", c.name, c.err, !c.want, c.want)
		}
		if !errors.Is(got, c.err) || got.Error() != c.err.Error() {
			t.Errorf("%s: Mark(%v) = %v: the error's chain and message must stay", c.name, c.err, got)
		}
	}
	if Mark(nil, store) != nil {
		t.Error("Mark(nil) is not nil")
	}
	once := Mark(io.EOF, nil)
	if Mark(once, nil) != once {
		t.Error("a marked error is marked again")
	}
}

// The store's answers (held, not held) come back as they are, without
// asking the store's predicate, which would read their messages.
func TestMarkLeavesAnswers(t *testing.T) {
	asked := 0
	store := func(error) bool { asked++; return true }
	for _, err := range []error{
		&fence.HeldError{Key: "k", Holder: &fence.Holder{Owner: "o"}},
		fmt.Errorf("driver: acquire: %w", &fence.HeldError{Key: "k"}),
		fmt.Errorf("%w: k is no longer held", fence.ErrNotHeld),
	} {
		if got := Mark(err, store); got != err {
			t.Errorf("Mark(%v) = %v; want it unchanged", err, got)
		}
	}
	if asked != 0 {
		t.Errorf("the store's predicate was asked %d times about the store's answers", asked)
	}
	// An answer joined with something else is judged whole.
	held := &fence.HeldError{Key: "k"}
	if err := Mark(fmt.Errorf("%w: %w", held, io.EOF), nil); !errors.Is(err, fence.ErrUnavailable) {
		t.Errorf("Mark of a HeldError joined with EOF: %v; want it marked", err)
	}
	if err := Mark(errors.Join(held, errLoading), func(err error) bool { return errors.Is(err, errLoading) }); !errors.Is(err, fence.ErrUnavailable) {
		t.Errorf("Mark of a HeldError joined with the store's own: %v; want it marked", err)
	}
}

func TestMarkLive(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	if err := MarkLive(ctx, io.EOF, nil); !errors.Is(err, fence.ErrUnavailable) {
		t.Errorf("MarkLive with a live context: %v; want it marked", err)
	}
	cancel()
	if err := MarkLive(ctx, io.EOF, nil); errors.Is(err, fence.ErrUnavailable) {
		t.Errorf("MarkLive once the context ended: %v; want it unmarked", err)
	}
}
