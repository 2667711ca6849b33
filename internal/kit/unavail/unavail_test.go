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
