package fencesqlite

import (
	"context"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/dirwatch"
)

var _ fence.Watcher = (*Store)(nil)

// Watch implements fence.Watcher on Linux with inotify on the database's
// directory: every commit that changes the database appends to its -wal
// file, so a write to that file may be a release. It wakes on any change
// of the file, not only of key (a release, but also an acquisition or a
// renewal of any key): a waiter then makes one attempt, a transaction that
// changes nothing and so writes nothing, so waiters do not wake each
// other. A change that reaches the main file without the -wal (no WAL
// yet: another program's) wakes nobody; the Client still polls, at its
// slowest rate, behind a watch.
//
// Each Watch holds one inotify instance until ctx ends; where the
// per-user limit on instances is reached, Watch fails and the Client
// polls.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	dir, wal := filepath.Dir(s.path), filepath.Base(s.path)+"-wal"
	ch, err := dirwatch.Watch(ctx, dir, unix.IN_MODIFY|unix.IN_CREATE, func(name string) bool { return name == wal })
	if err != nil {
		return nil, fmt.Errorf("fencesqlite: watch %q: %w", key, err)
	}
	return ch, nil
}
