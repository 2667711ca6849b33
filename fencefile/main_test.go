package fencefile_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/fencing/fence/internal/testkit/leakcheck"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencefile"
)

// holderEnv, when set to a store directory, makes the test binary act as
// a holder process: it acquires the key in holderKeyEnv, prints its token
// and waits to be killed.
// holderKindEnv, if set, names the kind it takes instead of a lock:
// "semaphore" (limit 2), "read" or "write".
const (
	holderEnv     = "FENCEFILE_TEST_HOLDER_DIR"
	holderKeyEnv  = "FENCEFILE_TEST_HOLDER_KEY"
	holderKindEnv = "FENCEFILE_TEST_HOLDER_KIND"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(holderEnv); dir != "" {
		os.Exit(holderMain(dir, os.Getenv(holderKeyEnv), os.Getenv(holderKindEnv)))
	}
	leakcheck.VerifyTestMain(m)
}

func holderMain(dir, key, kind string) int {
	s, err := fencefile.New(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, c, ttl := context.Background(), fence.New(s), fence.WithTTL(time.Minute)
	var l *fence.Lease
	switch kind {
	case "":
		l, err = c.TryAcquire(ctx, key, ttl)
	case "semaphore":
		l, err = c.Semaphore(key, 2).TryAcquire(ctx, ttl)
	case "read":
		l, err = c.RWMutex(key).TryAcquireRead(ctx, ttl)
	case "write":
		l, err = c.RWMutex(key).TryAcquireWrite(ctx, ttl)
	default:
		err = fmt.Errorf("unknown kind %q", kind)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("token %d\n", l.Token())
	time.Sleep(time.Hour)
	return 0
}
