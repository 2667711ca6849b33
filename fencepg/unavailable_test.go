package fencepg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fencing/fence"
)

// connClosed is as pgconn's error for a connection it closed after it
// broke (connLockError, unexported).
type connClosed struct{}

func (connClosed) Error() string     { return "conn closed" }
func (connClosed) SafeToRetry() bool { return true }
func (connClosed) Unwrap() error     { return pgconn.ErrConnClosed }

func TestMarkUnavailable(t *testing.T) {
	pg := func(code string) error {
		return fmt.Errorf("fencepg: acquire %q: %w", "k", &pgconn.PgError{Severity: "FATAL", Code: code})
	}
	live := context.Background()
	ended, cancel := context.WithCancel(live)
	cancel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"refused", live, refused, true},
		{"lost mid-statement", live, fmt.Errorf("failed to receive message: %w", io.ErrUnexpectedEOF), true},
		{"connection closed by pgx", live, fmt.Errorf("acquire: %w", connClosed{}), true},
		{"connection exception", live, pg("08006"), true},
		{"shutting down", live, pg("57P01"), true},
		{"crash restart", live, pg("57P02"), true},
		{"starting up", live, pg("57P03"), true},
		{"too many connections", live, pg("53300"), true},
		{"serialization failure", live, pg("40001"), true},
		{"deadlock", live, pg("40P01"), true},
		{"protocol violation", live, pg("08P01"), false},
		{"standby", live, pg("25006"), false},
		{"wrong password", live, pg("28P01"), false},
		{"no such database", live, pg("3D000"), false},
		{"key collision", live, pg("23505"), false},
		{"held", live, &fence.HeldError{Key: "k"}, false},
		{"driver closed", live, errDriverClosed, false},
		{"caller's context ended", ended, refused, false},
		{"caller's deadline", live, context.DeadlineExceeded, false},
	} {
		got := markUnavailable(c.ctx, c.err)
		if errors.Is(got, fence.ErrUnavailable) != c.want {
			t.Errorf("%s: markUnavailable(%v) matches fence.ErrUnavailable: %v; want %v", c.name, c.err, !c.want, c.want)
		}
		if !errors.Is(got, c.err) || got.Error() != c.err.Error() {
			t.Errorf("%s: markUnavailable(%v) = %v: the error's chain and message must stay", c.name, c.err, got)
		}
	}
}
