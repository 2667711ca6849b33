package fencemysql

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/fencing/fence"
)

func TestMarkUnavailable(t *testing.T) {
	ctx := context.Background()
	ended, cancel := context.WithCancel(ctx)
	cancel()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		want bool
	}{
		{"refused", ctx, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{"lost mid-statement", ctx, fmt.Errorf("fencemysql: acquire %q: %w", "k", mysql.ErrInvalidConn), true},
		{"bad connection", ctx, driver.ErrBadConn, true},
		{"too many connections", ctx, &mysql.MySQLError{Number: 1040}, true},
		{"shutting down", ctx, &mysql.MySQLError{Number: 1053}, true},
		{"lock wait timeout", ctx, &mysql.MySQLError{Number: 1205}, true},
		{"deadlock", ctx, &mysql.MySQLError{Number: 1213}, true},
		{"gone away, relayed", ctx, &mysql.MySQLError{Number: 2006}, true},
		{"held", ctx, &fence.HeldError{Key: "k"}, false},
		{"collision", ctx, ErrKeyCollision, false},
		{"no table", ctx, &mysql.MySQLError{Number: 1146}, false},
		{"access denied", ctx, &mysql.MySQLError{Number: 1045}, false},
		{"caller's context ended", ended, fmt.Errorf("x: %w", mysql.ErrInvalidConn), false},
	} {
		got := markUnavailable(c.ctx, c.err)
		if errors.Is(got, fence.ErrUnavailable) != c.want {
			t.Errorf("%s: markUnavailable(%v) matches ErrUnavailable: %v; want %v", c.name, c.err, !c.want, c.want)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("%s: markUnavailable(%v) = %v: lost the error", c.name, c.err, got)
		}
	}
}
