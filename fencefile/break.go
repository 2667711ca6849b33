package fencefile

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/fencing/fence"
)

// Delete takes key's lease away behind its holder's back, whatever its
// token. It is meant for
// tests of how code reacts to a lost lease (the conformance suite's forced
// loss, the fence command's tests), as an operator deleting a lock by hand
// would; it is not part of normal operation.
//
// Delete replaces key's lock file with a new, unlocked one that keeps the
// token counter. The key is free at once for other contenders, and their
// tokens go on growing. The old holder keeps a lock on a file that no
// longer has a name: its next renewal finds that out and reports the
// lease lost (fence.ErrNotHeld from Extend), and its Release changes
// nothing. Delete returns an error matching fence.ErrNotHeld if the key is
// not held.
func (s *Store) Delete(key string) error {
	if err := fence.ValidateKey(key); err != nil {
		return err
	}
	path := s.Path(key)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
	}
	if err != nil {
		return fmt.Errorf("fencefile: break %q: %w", key, err)
	}
	defer f.Close()
	if held, err := isLocked(f); err != nil || !held {
		if err != nil {
			return fmt.Errorf("fencefile: break %q: %w", key, err)
		}
		return fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
	}
	rec, err := readStable(f)
	if err != nil && !errors.Is(err, errEmptyRecord) {
		return fmt.Errorf("fencefile: break %q: %w", key, err)
	}
	tmp, err := os.CreateTemp(s.dir, ".fence-break-*")
	if err != nil {
		return fmt.Errorf("fencefile: break %q: %w", key, err)
	}
	defer os.Remove(tmp.Name())
	if err := s.fixMode(tmp); err != nil {
		tmp.Close()
		return fmt.Errorf("fencefile: break %q: %w", key, err)
	}
	// Skip one token, so that even an acquisition racing with Delete on the
	// old file cannot be issued the same token as the next holder.
	err = writeRecord(tmp, record{Key: key, Token: rec.Token + 1}, true)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("fencefile: break %q: %w", key, err)
	}
	syncDir(s.dir)
	return nil
}

var _ fence.Breaker = (*Store)(nil)

// Break implements fence.Breaker: it takes key's lock file away from its
// holder only if the holder's token is token (any holder's, for 0), and
// leaves a new, unlocked file in its place that keeps the token counter.
//
// A file's lock cannot be taken while its holder has it, so the check
// and the replacement are made atomic by the file's name: Break first
// renames the lock file aside, after which no one opens it by name and a
// grant on it that raced with the rename fails its check that the file
// still has its name. Break then reads the holder on the renamed file,
// which no grant can change any more. If it is not the one asked for (a
// newer holder took the key between Break's first look and the rename),
// Break gives the file its name back, changing nothing; only a newcomer
// that created a new lock file in that instant could prevent that, and
// Break then reports it loudly.
func (s *Store) Break(ctx context.Context, key string, token int64) (fence.Holder, error) {
	if err := ctx.Err(); err != nil {
		return fence.Holder{}, err
	}
	if err := fence.ValidateKey(key); err != nil {
		return fence.Holder{}, err
	}
	path := s.Path(key)
	h, held, err := inspectFile(path, key)
	switch {
	case err != nil:
		return fence.Holder{}, fmt.Errorf("fencefile: break %q: %w", key, err)
	case !held:
		return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
	case token != 0 && h.Token != token:
		return fence.Holder{}, &fence.HeldError{Key: key, Holder: &h}
	}
	if token == 0 {
		token = h.Token // whoever held it when we looked
	}

	if beforeBreakAside != nil {
		beforeBreakAside(path)
	}
	placeholder, err := os.CreateTemp(s.dir, ".fence-break-*")
	if err != nil {
		return fence.Holder{}, fmt.Errorf("fencefile: break %q: %w", key, err)
	}
	placeholder.Close()
	aside := placeholder.Name()
	defer os.Remove(aside)
	if err := os.Rename(path, aside); errors.Is(err, fs.ErrNotExist) {
		return fence.Holder{}, fmt.Errorf("%w: %q is free", fence.ErrNotHeld, key)
	} else if err != nil {
		return fence.Holder{}, fmt.Errorf("fencefile: break %q: %w", key, err)
	}
	h, held, err = inspectFile(aside, key)
	if err != nil || !held || h.Owner == "" || h.Token != token {
		// Not the lease asked for (or no lease at all): give the file its
		// name back.
		if lerr := os.Link(aside, path); lerr != nil {
			return fence.Holder{}, fmt.Errorf("fencefile: break %q raced with another process: the lock file was replaced while Break held it aside, and the lease on it (if any) is lost: %w", key, lerr)
		}
		syncDir(s.dir)
		switch {
		case err != nil:
			return fence.Holder{}, fmt.Errorf("fencefile: break %q: %w", key, err)
		case !held || h.Owner == "":
			return fence.Holder{}, fmt.Errorf("%w: %q was released", fence.ErrNotHeld, key)
		}
		return fence.Holder{}, &fence.HeldError{Key: key, Holder: &h}
	}

	// A new, unlocked lock file keeps the counter, one token skipped so
	// that even a grant racing with the rename on the old file is never
	// issued the next holder's token. A newcomer may have made one
	// already, drawing its token from the clock: it stays.
	tmp, err := os.CreateTemp(s.dir, ".fence-break-*")
	if err != nil {
		return h, s.restore(key, aside, path, err)
	}
	defer os.Remove(tmp.Name())
	err = s.fixMode(tmp)
	if err == nil {
		err = writeRecord(tmp, record{Key: key, Token: h.Token + 1}, true)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return h, s.restore(key, aside, path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return h, fmt.Errorf("fencefile: break %q: the lease is broken, but its token counter is lost: %w", key, err)
	}
	syncDir(s.dir)
	return h, nil
}

// beforeBreakAside, set only by tests, runs when Break has seen the
// holder it breaks, before it renames the lock file aside.
var beforeBreakAside func(path string)

// restore gives a lock file set aside by Break its name back after err.
func (s *Store) restore(key, aside, path string, err error) error {
	if lerr := os.Link(aside, path); lerr != nil {
		return fmt.Errorf("fencefile: break %q: %w; the lease is broken, and its token counter is lost: %w", key, err, lerr)
	}
	return fmt.Errorf("fencefile: break %q (nothing changed): %w", key, err)
}
