package fencefile

import (
	"errors"
	"fmt"
	"os"

	"github.com/fencing/fence"
)

// Break takes key's lease away behind its holder's back. It is meant for
// tests of how code reacts to a lost lease (the conformance suite's forced
// loss, the fence command's tests), as an operator deleting a lock by hand
// would; it is not part of normal operation.
//
// Break replaces key's lock file with a new, unlocked one that keeps the
// token counter. The key is free at once for other contenders, and their
// tokens go on growing. The old holder keeps a lock on a file that no
// longer has a name: its next renewal finds that out and reports the
// lease lost (fence.ErrNotHeld from Extend), and its Release changes
// nothing. Break returns an error matching fence.ErrNotHeld if the key is
// not held.
func (s *Store) Break(key string) error {
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
	// Skip one token, so that even an acquisition racing with Break on the
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
