package fencefile_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/fencing/fence"
	"github.com/fencing/fence/fencefile"
)

// holderEnv, when set to a store directory, makes the test binary act as
// a holder process: it acquires the key in holderKeyEnv, prints its token
// and waits to be killed.
const (
	holderEnv    = "FENCEFILE_TEST_HOLDER_DIR"
	holderKeyEnv = "FENCEFILE_TEST_HOLDER_KEY"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(holderEnv); dir != "" {
		os.Exit(holderMain(dir, os.Getenv(holderKeyEnv)))
	}
	goleak.VerifyTestMain(m)
}

func holderMain(dir, key string) int {
	s, err := fencefile.New(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	l, err := fence.New(s).TryAcquire(context.Background(), key, fence.WithTTL(time.Minute))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("token %d\n", l.Token())
	time.Sleep(time.Hour)
	return 0
}
