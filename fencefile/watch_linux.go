package fencefile

import (
	"context"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/dirwatch"
)

var _ fence.Watcher = (*Store)(nil)

// Watch implements fence.Watcher on Linux with inotify on the store's
// directory: a lock file is closed after writing when its holder releases
// it or exits (the kernel closes a dead holder's files), and replaced when
// it is broken. The same goes for semaphore slot files and reader-writer
// lock files; counter files, written by grants and waiting writers, wake
// nobody. Failed acquisitions only read the file, so waiters do not
// wake each other.
//
// Each Watch holds one inotify instance until ctx ends; where the
// per-user limit on instances is reached, Watch fails and the Client polls.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, error) {
	base := strings.TrimSuffix(fileName(key), lockSuffix)
	const mask = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_CREATE | unix.IN_DELETE
	ch, err := dirwatch.Watch(ctx, s.dir, mask, func(name string) bool { return isWakingFile(name, base) })
	if err != nil {
		return nil, fmt.Errorf("fencefile: watch %q: %w", key, err)
	}
	return ch, nil
}
