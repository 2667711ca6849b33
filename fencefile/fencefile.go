// Package fencefile is the fence driver for one host: one lock file per
// key under a directory, locked with the kernel's file locks (OFD locks on
// Linux, flock elsewhere), so the kernel itself releases a lease when its
// holder process exits or dies, even by SIGKILL. It is the default store
// of the fence command.
//
// Each lock file also holds a record: the key's fencing token counter and
// the current holder (owner, host, pid, acquisition time and the caller's
// metadata). The counter is written, and synced to disk, under the lock
// with every acquisition, and the store never deletes lock files, so
// tokens keep growing across releases, process deaths, restarts and
// separate Stores opened on the same directory.
//
// A lease here is bound to the holder's process, not to a TTL in the
// store: it ends when the holder releases it or exits. The Client's local
// validity and renewal still apply; a renewal checks that the lock file
// still names this owner and is still the very file the holder locked, so
// a lock file that was deleted or replaced behind the holder's back is
// reported as lost at the next renewal (a newcomer may lock a new file
// meanwhile, with a greater token). On Linux, waiters are woken through
// inotify when a lock file is released, its holder dies or it is
// replaced; elsewhere the Client polls with backoff. There is no queue and
// no fairness.
//
// The Store also does semaphores (one slot file per holder) and
// reader-writer locks (shared and exclusive locks on one file, preferring
// writers); see Supports and docs/file.md.
//
// The store works only between processes of one host, on a local file
// system: not over NFS or other network file systems, whose locks are
// unreliable. See docs/file.md.
//
// # Tokens and the clock
//
// Each token is max(counter+1, the wall clock in microseconds since 1970),
// for every kind. While the counter exists, tokens grow whatever the clock
// does. A counter can still be lost: its file or the whole directory
// deleted (the next acquisition recreates the directory), a tmpfs emptied
// by a reboot, a file damaged or put back from an older copy. The first
// token after the loss is then the clock's reading, above every earlier
// token under one assumption: the host's wall clock, when that token is
// issued, reads later than the last token issued before the loss. Tokens
// are the clock's reading at their grant (grants of a key are more than a
// microsecond apart), so this holds unless the clock was set back, between
// the last grant before the loss and the first one after it, by as much as
// the time that passed between them. Tokens are positive and fit an int64
// (about 1.8e15 in 2026). See docs/file.md.
//
// # Permissions
//
// A lock file names its holder, and whoever can open it can block its key
// with a shared lock. Files are therefore made 0600, whatever the umask,
// or in a directory shared with its group (group-writable or setgid, such
// as 2770) with the directory's group and its group read and write bits;
// never with any access for others. New refuses a directory other users
// may write to, and an acquisition tightens a file found with a looser
// mode. See docs/file.md for sharing a store between users.
package fencefile

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/fencing/fence"
)

// Store is a directory of lock files. It holds no open files itself (each
// granted lease holds its own), needs no closing, and is safe for
// concurrent use.
type Store struct {
	dir    string
	access dirAccess
}

var (
	_ fence.Driver    = (*Store)(nil)
	_ fence.Inspector = (*Store)(nil)
	_ fence.Lister    = (*Store)(nil)
)

// New returns a Store over the directory dir, creating it (mode 0700, and
// any missing parents) if it does not exist. It fails if dir is not a
// directory, if this process cannot create files in it, or if other users
// may write to it. Files are made with the directory's group, its group
// read and write bits and no access for others: 0600 in a private
// directory, 0660 in a group-shared one (2770); see docs/file.md.
func New(dir string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("fencefile: empty directory name")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("fencefile: directory %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("fencefile: cannot create store directory: %w", err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("fencefile: store directory: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("fencefile: store directory %s is not a directory", abs)
	}
	access, err := checkDir(abs, fi)
	if err != nil {
		return nil, fmt.Errorf("fencefile: %w", err)
	}
	if err := checkWritable(abs); err != nil {
		return nil, fmt.Errorf("fencefile: store directory %s is not usable: %w", abs, err)
	}
	return &Store{dir: abs, access: access}, nil
}

// Dir returns the store's directory, as an absolute path.
func (s *Store) Dir() string { return s.dir }

// Path returns the path of key's lock file. The file exists once key has
// been acquired at least once.
func (s *Store) Path(key string) string { return filepath.Join(s.dir, fileName(key)) }

func checkWritable(dir string) error {
	f, err := os.CreateTemp(dir, ".fence-check-*")
	if err != nil {
		return err
	}
	name := f.Name()
	f.Close()
	return os.Remove(name)
}

var (
	hostname, _ = os.Hostname()
	pid         = os.Getpid()
)

// TryAcquire implements fence.Driver: it takes key's lock file without
// waiting and, under the lock, bumps and syncs the key's token counter and
// records the holder. Semaphores and reader-writer locks have files of
// their own (see Supports).
func (s *Store) TryAcquire(ctx context.Context, req fence.Request) (fence.Claim, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	switch req.Kind {
	case fence.KindLock:
	case fence.KindSemaphore:
		return retryReplaced(func() (fence.Claim, error) { return s.acquireSlot(req) })
	case fence.KindRead, fence.KindWrite:
		return retryReplaced(func() (fence.Claim, error) { return s.acquireRW(req) })
	default:
		return nil, fmt.Errorf("fencefile: acquire %q: %w: %s", req.Key, fence.ErrUnsupported, req.Kind)
	}
	path := s.Path(req.Key)
	if testsLocks {
		// Where a lock can be tested without being taken, a held key is
		// refused without opening its file for writing: closing such a file
		// would wake every waiter watching it (see Watch).
		if h, held := s.peek(path, req.Key); held {
			return nil, &fence.HeldError{Key: req.Key, Holder: h}
		}
	}
	// The loop retries only if the lock file was replaced or deleted
	// between our open and our grant (by Delete or Break, or by hand): a grant counts
	// only if, once its token is written, the file still has its name, so
	// that a newcomer on a new file draws its token from the clock later.
	for attempt := 0; ; attempt++ {
		f, err := s.openFile(path)
		if err != nil {
			return nil, fmt.Errorf("fencefile: acquire %q: %w", req.Key, err)
		}
		ok, err := tryLock(f)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("fencefile: acquire %q: %w", req.Key, err)
		}
		if !ok {
			h := heldBy(f, req.Key)
			f.Close()
			return nil, &fence.HeldError{Key: req.Key, Holder: h}
		}
		c, err := s.grant(f, req)
		if err != nil {
			unlock(f)
			f.Close()
			return nil, fmt.Errorf("fencefile: acquire %q: %w", req.Key, err)
		}
		if afterGrantWrite != nil {
			afterGrantWrite(path)
		}
		if same, err := samePath(f, path); err != nil || !same {
			c.close()
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("fencefile: acquire %q: %w", req.Key, err)
			}
			if attempt >= 10 {
				return nil, fmt.Errorf("fencefile: acquire %q: lock file %s keeps being replaced", req.Key, path)
			}
			continue
		}
		return c, nil
	}
}

// afterGrantWrite, set only by tests, runs when a grant has written its
// token to the lock or counter file at path, before it checks that path
// still names that file.
var afterGrantWrite func(path string)

// grant issues the next token for the key whose lock file f this process
// has just locked, and records the holder.
func (s *Store) grant(f *os.File, req fence.Request) (*claim, error) {
	var prev int64
	rec, err := readRecord(f)
	switch {
	case err == nil:
		if rec.Key != req.Key {
			return nil, fmt.Errorf("lock file %s belongs to key %q (hash collision or foreign file); refusing to share it", f.Name(), rec.Key)
		}
		prev = rec.Token
	case errors.Is(err, errEmptyRecord):
		// A new lock file, or one whose counter was lost (the file or the
		// directory deleted): the token comes from the clock.
	case errors.Is(err, errCorruptRecord):
		// The counter is unreadable (damaged by hand, or by a crash of the
		// host): lost as well.
	default:
		return nil, err
	}
	token, err := nextToken(prev)
	if err != nil {
		return nil, fmt.Errorf("lock file %s: %w", f.Name(), err)
	}
	now := time.Now().Round(0)
	rec = record{
		Key:        req.Key,
		Token:      token,
		Owner:      req.Owner,
		Host:       hostname,
		PID:        pid,
		AcquiredAt: &now,
		Meta:       req.Meta,
	}
	if err := writeRecord(f, rec, true); err != nil {
		return nil, fmt.Errorf("write lock file %s: %w", f.Name(), err)
	}
	return &claim{f: f, path: f.Name(), key: req.Key, owner: req.Owner, token: rec.Token}, nil
}

// peek reports whether the lock file at path is locked, and by whom,
// opening it only for reading.
func (s *Store) peek(path, key string) (*fence.Holder, bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	if locked, err := isLocked(f); err != nil || !locked {
		return nil, false
	}
	return heldBy(f, key), true
}

// openFile opens one of the store's files at path for reading and writing,
// creating it if needed with the store's file mode (whatever the umask),
// and recreating the store's directory if it has vanished. It does not
// follow a symbolic link, and refuses anything but a regular file. An
// existing file with another mode is given the store's, if this process
// may change it; one that grants more than the store's mode and that this
// process may not change is refused.
//
// The descriptor is close-on-exec (os.OpenFile always asks for it), so a
// held lock never leaks into a child process.
func (s *Store) openFile(path string) (*os.File, error) {
	const flags = os.O_RDWR | syscall.O_NOFOLLOW
	var (
		f       *os.File
		err     error
		created bool
	)
	recreated := false
	for attempt := 0; ; attempt++ {
		f, err = os.OpenFile(path, flags, 0)
		if !errors.Is(err, fs.ErrNotExist) {
			break
		}
		f, err = os.OpenFile(path, flags|os.O_CREATE|os.O_EXCL, s.access.filePerm)
		if err == nil {
			created = true
			break
		}
		switch {
		case attempt >= 3:
			return nil, err
		case errors.Is(err, fs.ErrNotExist) && !recreated:
			// The directory itself is gone (a tmpfs emptied, an rm -r).
			// Recreating it is safe: new counters start from the clock.
			recreated = true
			if err := s.recreateDir(); err != nil {
				return nil, err
			}
		case errors.Is(err, fs.ErrExist):
			// Created by someone else meanwhile: open theirs.
		default:
			return nil, err
		}
	}
	if err != nil {
		return nil, err
	}
	if err := s.fixMode(f); err != nil {
		f.Close()
		return nil, err
	}
	if created {
		// Make the new file's name durable, so that its token counter
		// cannot vanish with a crash of the host.
		syncDir(s.dir)
	}
	return f, nil
}

// recreateDir makes the store's directory again, as it was when the store
// was opened: the same mode and group (an error if this process may not
// give it that group).
func (s *Store) recreateDir() error {
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // recreated by someone else meanwhile
		}
		return fmt.Errorf("recreate store directory: %w", err)
	}
	if s.access.gid >= 0 {
		if fi, err := os.Stat(s.dir); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Gid) != s.access.gid {
				if err := os.Chown(s.dir, -1, s.access.gid); err != nil {
					return fmt.Errorf("recreate store directory: give it its group back: %w", err)
				}
			}
		}
	}
	// After the group: a chown may clear setgid.
	if err := os.Chmod(s.dir, s.access.dirMode); err != nil {
		return fmt.Errorf("recreate store directory: %w", err)
	}
	syncDir(filepath.Dir(s.dir))
	return nil
}

func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}

// samePath reports whether path still names the file f has open.
func samePath(f *os.File, path string) (bool, error) {
	fi, err := f.Stat()
	if err != nil {
		return false, err
	}
	pi, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return os.SameFile(fi, pi), nil
}

// heldBy returns the holder a locked file's record names, or nil if it
// names none (the holder is between locking and writing it).
func heldBy(f *os.File, key string) *fence.Holder {
	rec, err := readStable(f)
	if err != nil || rec.Owner == "" || rec.Key != key {
		return nil
	}
	h := rec.holder()
	return &h
}

// readStable reads the record of a file another process may be writing:
// a read that overlaps a write can see a torn record, so it tries again a
// few times.
func readStable(f *os.File) (record, error) {
	var rec record
	var err error
	for i := range 4 {
		rec, err = readRecord(f)
		if err == nil || errors.Is(err, errEmptyRecord) {
			return rec, err
		}
		time.Sleep(time.Duration(i+1) * time.Millisecond)
	}
	return rec, err
}

// Inspect implements fence.Inspector. The Holder's ExpiresIn is 0: a lease
// lasts until its holder releases it or exits. Its Meta carries "host",
// "pid" and "acquired_at" besides the holder's own metadata.
func (s *Store) Inspect(ctx context.Context, key string) (fence.Holder, error) {
	if err := ctx.Err(); err != nil {
		return fence.Holder{}, err
	}
	h, held, err := inspectFile(s.Path(key), key)
	if err != nil {
		return fence.Holder{}, fmt.Errorf("fencefile: inspect %q: %w", key, err)
	}
	if !held {
		return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
	}
	return h, nil
}

// inspectFile tells whether the lock file at path is locked and by whom.
// key is the expected key, or "" to take the record's.
func inspectFile(path, key string) (fence.Holder, bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return fence.Holder{}, false, nil
	}
	if err != nil {
		return fence.Holder{}, false, err
	}
	defer f.Close()
	locked, err := isLocked(f)
	if err != nil || !locked {
		return fence.Holder{}, false, err
	}
	rec, err := readStable(f)
	switch {
	case errors.Is(err, errEmptyRecord):
		// Locked, record not written yet: held, holder unknown.
		return fence.Holder{Key: key}, key != "", nil
	case err != nil:
		return fence.Holder{}, false, err
	case key != "" && rec.Key != key:
		return fence.Holder{}, false, fmt.Errorf("lock file %s belongs to key %q", path, rec.Key)
	}
	h := rec.holder()
	if rec.Owner == "" {
		// Locked by a new holder that has not written its record yet.
		h = fence.Holder{Key: rec.Key}
	}
	return h, true, nil
}

// List implements fence.Lister: it reads every lock file of the directory
// and returns the held ones whose key starts with prefix, sorted by key.
// Nothing is held in a directory that has vanished.
func (s *Store) List(ctx context.Context, prefix string) ([]fence.Holder, error) {
	entries, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("fencefile: list: %w", err)
	}
	var hs []fence.Holder
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if !e.Type().IsRegular() || !isLockName(e.Name()) {
			continue
		}
		h, held, err := inspectFile(filepath.Join(s.dir, e.Name()), "")
		if errors.Is(err, errCorruptRecord) {
			continue // not a record of ours; TryAcquire of its key says more
		}
		if err != nil {
			return nil, fmt.Errorf("fencefile: list: %w", err)
		}
		if held && h.Key != "" && strings.HasPrefix(h.Key, prefix) {
			hs = append(hs, h)
		}
	}
	slices.SortFunc(hs, func(a, b fence.Holder) int { return cmp.Compare(a.Key, b.Key) })
	return hs, nil
}

// claim is one granted lease: it keeps the locked lock file open.
type claim struct {
	f     *os.File // nil once released or found lost
	path  string
	key   string
	owner string
	token int64
	kind  string // record.Kind of the file: "" for a lock file
	// shared: a reader's claim on a reader-writer lock file, whose record
	// names no reader (readers share the file and never write it).
	shared bool
}

func (c *claim) Token() int64 { return c.token }

// check reports whether the store still holds the lease for this owner:
// the lock file at the key's path is still the file we locked, and its
// record still names us.
func (c *claim) check() error {
	if c.f == nil {
		return fmt.Errorf("%w: %q (token %d) no longer held by %s", fence.ErrNotHeld, c.key, c.token, c.owner)
	}
	same, err := samePath(c.f, c.path)
	if errors.Is(err, fs.ErrNotExist) || err == nil && !same {
		return fmt.Errorf("%w: lock file of %q was deleted or replaced", fence.ErrNotHeld, c.key)
	}
	if err != nil {
		return err
	}
	if c.shared {
		return nil
	}
	rec, err := readRecord(c.f)
	if err != nil && !errors.Is(err, errEmptyRecord) && !errors.Is(err, errCorruptRecord) {
		return err
	}
	if err != nil || rec.Owner != c.owner || rec.Token != c.token || rec.Key != c.key {
		return fmt.Errorf("%w: lock file of %q names another holder", fence.ErrNotHeld, c.key)
	}
	return nil
}

// Extend implements fence.Claim. The store keeps no TTL, so extending only
// checks that the lease is still ours. When it is not, the claim lets go
// of its file at once (the Client calls nothing more on a lost claim).
func (c *claim) Extend(ctx context.Context, _ time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	err := c.check()
	if errors.Is(err, fence.ErrNotHeld) {
		c.close()
	}
	return err
}

// Release implements fence.Claim: if the lease is still ours it clears the
// holder from the record, keeping the token counter, and unlocks.
func (c *claim) Release(ctx context.Context) error {
	if c.f == nil {
		return c.check()
	}
	err := c.check()
	if err == nil && !c.shared {
		rec := record{Key: c.key, Token: c.token, Kind: c.kind}
		err = writeRecord(c.f, rec, false)
		if err != nil {
			err = fmt.Errorf("fencefile: release %q: %w", c.key, err)
		}
	}
	// Whatever happened, this claim is over: closing the file drops the
	// lock (if the file was replaced, the lock is on the old file and
	// bothers no one).
	c.close()
	return err
}

func (c *claim) close() {
	if c.f != nil {
		unlock(c.f)
		c.f.Close()
		c.f = nil
	}
}
