package fence_test

import (
	"context"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencemem"
)

// Every option is accepted exactly where it has an effect: the types
// refuse the others at compile time. A Run-only option cannot be given to
// Acquire (nor to New), and a Client-only option cannot be given to a
// call.
func TestOptionScopes(t *testing.T) {
	var (
		client  = reflect.TypeFor[fence.ClientOption]()
		acquire = reflect.TypeFor[fence.AcquireOption]()
		run     = reflect.TypeFor[fence.RunOption]()
	)
	type scopes struct{ client, acquire, run bool }
	all := scopes{true, true, true}
	for name, c := range map[string]struct {
		opt  any
		want scopes
	}{
		"WithTTL":           {fence.WithTTL(time.Second), all},
		"WithWait":          {fence.WithWait(time.Second), all},
		"WithRenewInterval": {fence.WithRenewInterval(time.Second), all},
		"WithoutRenewal":    {fence.WithoutRenewal(), all},
		"WithDriftMargin":   {fence.WithDriftMargin(time.Second), all},
		"WithOwner":         {fence.WithOwner("w"), all},
		"WithMetadata":      {fence.WithMetadata(nil), all},
		"WithLogger":        {fence.WithLogger(slog.Default()), all},
		"SkipIfHeld":        {fence.SkipIfHeld(), scopes{run: true}},
		"HoldAtLeast":       {fence.HoldAtLeast(time.Second), scopes{run: true}},
		"WithObserver":      {fence.WithObserver(nil), scopes{client: true}},
		"WithStoreName":     {fence.WithStoreName("s"), scopes{client: true}},
	} {
		typ := reflect.TypeOf(c.opt)
		got := scopes{typ.Implements(client), typ.Implements(acquire), typ.Implements(run)}
		if got != c.want {
			t.Errorf("%s: (client, acquire, run) = %v; want %v", name, got, c.want)
		}
	}
}

// What the types cannot refuse is refused when the call runs, naming the
// option and the call, and nothing is acquired: WithWait given to a call
// that never waits.
func TestWaitRefusedWhereNothingWaits(t *testing.T) {
	ctx := ctxT(t)
	drv := fencemem.New()
	c := fence.New(drv)
	ran := func(context.Context, *fence.Lease) error {
		t.Error("a Run refused for its options ran its function")
		return nil
	}
	wait := fence.WithWait(time.Second)
	for call, try := range map[string]func() error{
		"TryAcquire": func() error { _, err := c.TryAcquire(ctx, "k", wait); return err },
		"Semaphore.TryAcquire": func() error {
			_, err := c.Semaphore("k", 2).TryAcquire(ctx, wait)
			return err
		},
		"RWMutex.TryAcquireRead": func() error {
			_, err := c.RWMutex("k").TryAcquireRead(ctx, wait)
			return err
		},
		"RWMutex.TryAcquireWrite": func() error {
			_, err := c.RWMutex("k").TryAcquireWrite(ctx, wait)
			return err
		},
		"Run with SkipIfHeld": func() error { return c.Run(ctx, "k", ran, fence.SkipIfHeld(), wait) },
		"Semaphore.Run with SkipIfHeld": func() error {
			return c.Semaphore("k", 2).Run(ctx, ran, wait, fence.SkipIfHeld())
		},
		"Partitions": func() error {
			return c.Partitions("g", []string{"p"}, wait).Run(ctx, func(context.Context, string, *fence.Lease) error {
				t.Error("Partitions refused for its options ran work")
				return nil
			})
		},
	} {
		err := try()
		if !errors.Is(err, fence.ErrInvalidOption) || !strings.Contains(err.Error(), "WithWait given to "+call) {
			t.Errorf("%s given WithWait: %v; want ErrInvalidOption naming WithWait and %s", call, err, call)
		}
	}
	if hs, err := drv.List(ctx, ""); err != nil || len(hs) != 0 {
		t.Errorf("held after refused calls: %v, %v; want nothing", hs, err)
	}

	// As a default, WithWait is fine: the calls that wait use it, and a
	// Run that skips ignores it.
	d := fence.New(drv, wait)
	l, err := d.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("TryAcquire on a Client with a default wait: %v", err)
	}
	defer l.Release(ctx)
	if _, err := d.Semaphore("s", 1, wait).TryAcquire(ctx); err != nil {
		t.Errorf("TryAcquire on a Semaphore with a default wait: %v", err)
	}
	if err := d.Run(ctx, "k", ran, fence.SkipIfHeld()); !errors.Is(err, fence.ErrSkipped) {
		t.Errorf("Run with SkipIfHeld on a Client with a default wait: %v; want ErrSkipped", err)
	}
}
