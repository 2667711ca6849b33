package fence_test

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

// plainDriver hides every optional interface of the driver it wraps.
type plainDriver struct{ fence.Driver }

func TestBreakRefusesBadCallsAndLogsBreaks(t *testing.T) {
	ctx := t.Context()
	var log bytes.Buffer
	c := fence.New(fencemem.New(), fence.WithLogger(slog.New(slog.NewTextHandler(&log, nil))))
	l, err := c.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Break(ctx, "k", 0); !errors.Is(err, fence.ErrInvalidOption) {
		t.Errorf("Break with token 0 without BreakAnyHolder: %v; want ErrInvalidOption", err)
	}
	if _, err := c.Break(ctx, "k", -1); !errors.Is(err, fence.ErrInvalidToken) {
		t.Errorf("Break with token -1: %v; want ErrInvalidToken", err)
	}
	if _, err := c.Break(ctx, "", 1); !errors.Is(err, fence.ErrInvalidKey) {
		t.Errorf("Break of an empty key: %v; want ErrInvalidKey", err)
	}
	plain := fence.New(plainDriver{fencemem.New()})
	if _, err := plain.Break(ctx, "k", 1); !errors.Is(err, fence.ErrUnsupported) {
		t.Errorf("Break on a driver without Breaker: %v; want ErrUnsupported", err)
	}
	if l.Err() != nil {
		t.Fatalf("refused breaks ended the lease: %v", l.Err())
	}

	h, err := c.Break(ctx, "k", l.Token())
	if err != nil {
		t.Fatal(err)
	}
	if h.Owner != l.Owner() || h.Token != l.Token() {
		t.Errorf("Break returned owner %q token %d; want %q %d", h.Owner, h.Token, l.Owner(), l.Token())
	}
	line := ""
	for _, s := range strings.Split(log.String(), "\n") {
		if strings.Contains(s, "lease broken") {
			line = s
		}
	}
	for _, want := range []string{"level=WARN", `key=k`, "token=1", "owner=" + l.Owner()} {
		if !strings.Contains(line, want) {
			t.Errorf("no %q in the break's log line %q (log:\n%s)", want, line, log.String())
		}
	}
	var lost *fence.LostError
	if err := l.Renew(ctx); !errors.As(err, &lost) || lost.Reason != fence.LossRefused {
		t.Errorf("broken lease's Renew: %v; want a *LostError with reason %q", err, fence.LossRefused)
	}
}

func TestAdvanceGuard(t *testing.T) {
	ctx := t.Context()
	for _, strict := range []bool{false, true} {
		c := fence.New(fencemem.New())
		l, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		g := &fence.MemoryGuard{Strict: strict}
		if _, err := c.Break(ctx, "k", l.Token(), fence.AdvanceGuard(g, "r")); err != nil {
			t.Fatal(err)
		}
		if err := g.Admit(ctx, "r", l.Token()); !errors.Is(err, fence.ErrStale) {
			t.Errorf("strict %v: the broken holder's write after the break: %v; want ErrStale", strict, err)
		}
		next, err := c.TryAcquire(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Admit(ctx, "r", next.Token()); err != nil {
			t.Errorf("strict %v: the next holder's write (token %d): %v", strict, next.Token(), err)
		}
		// A guard already past the broken token is left as it is.
		if _, err := c.Break(ctx, "k", next.Token(), fence.AdvanceGuard(g, "r")); err != nil {
			t.Errorf("strict %v: Break advancing a guard already there: %v", strict, err)
		}
	}
}
