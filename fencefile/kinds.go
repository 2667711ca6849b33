package fencefile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/fencing/fence"
	"github.com/fencing/fence/internal/kit/rwpref"
)

// Semaphores and reader-writer locks live in files of their own beside the
// lock files, named like the key's lock file with another ending, so each
// kind is its own namespace and List (which reads only ".lock" files)
// never shows them:
//
//	NAME.HASH.sem-count   a semaphore's token counter and current limit
//	NAME.HASH.sem-0 ...   its slot files, one per holder, locked exclusively
//	NAME.HASH.rw          the reader-writer lock: readers lock it shared,
//	                      the writer exclusively (and records itself in it)
//	NAME.HASH.rw-count    its token counter (one sequence for readers and
//	                      writers) and the waiting writer's intent
//
// Every grant of these kinds locks the kind's counter file for an instant
// (waiting for it: no grant holds it longer than a write and an fsync), and
// decides and issues the token under that lock, so tokens follow the real
// order of grants across slots and across readers and writers.

const (
	kindSemaphore = "semaphore"
	kindRW        = "rw"
	countSuffix   = "-count"
)

var _ fence.KindSupporter = (*Store)(nil)

// Supports implements fence.KindSupporter: the Store does locks,
// semaphores (one slot file per holder) and reader-writer locks (shared
// and exclusive locks on one file), writer-preferring.
func (s *Store) Supports(k fence.Kind) bool { return k <= fence.KindWrite }

// kindPath returns the path of one of key's files for a kind other than
// KindLock: the lock file's name with ".lock" replaced by "."+suffix.
func (s *Store) kindPath(key, suffix string) string {
	return filepath.Join(s.dir, strings.TrimSuffix(fileName(key), lockSuffix)+"."+suffix)
}

func (s *Store) slotPath(key string, slot int) string {
	return s.kindPath(key, "sem-"+strconv.Itoa(slot))
}

// counter is a kind's counter file, locked by this process while it
// decides a grant.
type counter struct {
	f    *os.File
	path string
	rec  record
}

// errCounterReplaced: a counter file was deleted or replaced while a grant
// used it. The grant is undone and tried again on the file now at the path.
var errCounterReplaced = errors.New("counter file deleted or replaced during the grant")

// retryReplaced runs acquire again while its grant fails with
// errCounterReplaced, a few times at most.
func retryReplaced(acquire func() (fence.Claim, error)) (fence.Claim, error) {
	for attempt := 0; ; attempt++ {
		c, err := acquire()
		if !errors.Is(err, errCounterReplaced) || attempt >= 10 {
			return c, err
		}
	}
}

// lockCounter opens and locks the counter file at path, waiting for the
// lock, and reads its record.
func (s *Store) lockCounter(path, key, kind string) (*counter, error) {
	f, err := s.openFile(path)
	if err != nil {
		return nil, err
	}
	if err := lockWait(f); err != nil {
		f.Close()
		return nil, err
	}
	c := &counter{f: f, path: path}
	rec, err := readRecord(f)
	switch {
	case err == nil:
		if rec.Key != key || rec.Kind != kind {
			c.close()
			return nil, fmt.Errorf("counter file %s belongs to %s %q (hash collision or foreign file); refusing to share it", path, rec.Kind, rec.Key)
		}
		c.rec = rec
	case errors.Is(err, errEmptyRecord), errors.Is(err, errCorruptRecord):
		// A new counter, or one lost (deleted, or damaged): the next
		// token comes from the clock, as for a lock file.
		c.rec = record{Key: key, Kind: kind}
	default:
		c.close()
		return nil, err
	}
	return c, nil
}

// issue raises the counter and writes it to disk: the token of a grant.
// The token counts only if the counter file still has its name once the
// token is written: a grant that raced with its deletion is refused with
// errCounterReplaced, so that no grant on a new counter file, whose token
// comes from the clock, is concurrent with one on the old file.
func (c *counter) issue() (int64, error) {
	token, err := nextToken(c.rec.Token)
	if err != nil {
		return 0, fmt.Errorf("counter file %s: %w", c.path, err)
	}
	c.rec.Token = token
	if err := writeRecord(c.f, c.rec, true); err != nil {
		return 0, fmt.Errorf("write counter file %s: %w", c.path, err)
	}
	if afterGrantWrite != nil {
		afterGrantWrite(c.path)
	}
	if same, err := samePath(c.f, c.path); err != nil || !same {
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, err
		}
		return 0, fmt.Errorf("%w: %s", errCounterReplaced, c.path)
	}
	return token, nil
}

func (c *counter) close() {
	unlock(c.f)
	c.f.Close()
}

// readCounter reads the counter file at path without locking it; the zero
// record if there is none yet.
func readCounter(path string) record {
	f, err := os.Open(path)
	if err != nil {
		return record{}
	}
	defer f.Close()
	rec, _ := readStable(f)
	return rec
}

// lockedReadOnly reports whether another open file holds a lock on the file
// at path (with exclusiveOnly: an exclusive one), opening it only for reading so
// that closing it wakes no watcher. A missing file is not locked.
func lockedReadOnly(path string, exclusiveOnly bool) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var locked bool
	if exclusiveOnly {
		locked, err = hasWriter(f)
	} else {
		locked, err = isLocked(f)
	}
	return err == nil && locked
}

// acquireSlot takes a free slot of the semaphore req.Key.
func (s *Store) acquireSlot(req fence.Request) (fence.Claim, error) {
	cpath := s.kindPath(req.Key, "sem"+countSuffix)
	if testsLocks && s.slotsFull(cpath, req) {
		// Refused without opening a slot file for writing: closing it
		// would wake every waiter watching the key.
		return nil, &fence.HeldError{Key: req.Key}
	}
	c, err := s.lockCounter(cpath, req.Key, kindSemaphore)
	if err != nil {
		return nil, fmt.Errorf("fencefile: acquire semaphore %q: %w", req.Key, err)
	}
	defer c.close()
	if c.rec.Limit == 0 {
		// A new counter, or one lost while slots may be held: the holders'
		// slot files tell the limit they were granted with.
		c.rec.Limit = s.heldLimit(req.Key)
	}
	// Every holder was granted with the counter's limit (a grant with
	// another limit happens only once no slot is held), so its holders sit
	// in the slots below it.
	if old := c.rec.Limit; old != 0 && old != req.Limit {
		for i := range old {
			if lockedReadOnly(s.slotPath(req.Key, i), false) {
				return nil, fmt.Errorf("fencefile: acquire semaphore %q: %w: held with limit %d, asked with %d", req.Key, fence.ErrLimitMismatch, old, req.Limit)
			}
		}
	}
	for i := range req.Limit {
		path := s.slotPath(req.Key, i)
		f, err := s.openFile(path)
		if err != nil {
			return nil, fmt.Errorf("fencefile: acquire semaphore %q: %w", req.Key, err)
		}
		ok, err := tryLock(f)
		if err != nil || !ok {
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("fencefile: acquire semaphore %q: %w", req.Key, err)
			}
			continue
		}
		c.rec.Limit = req.Limit
		cl, err := s.grantKind(c, f, req, kindSemaphore)
		if err != nil {
			return nil, fmt.Errorf("fencefile: acquire semaphore %q: %w", req.Key, err)
		}
		return cl, nil
	}
	return nil, &fence.HeldError{Key: req.Key}
}

// heldLimit returns the limit recorded by a holder of one of key's slots,
// or 0 if no slot is held. Slots are taken lowest first, so the slot files
// run from 0 without a gap; the first missing one ends the search.
func (s *Store) heldLimit(key string) int {
	for i := 0; ; i++ {
		f, err := os.Open(s.slotPath(key, i))
		if err != nil {
			return 0
		}
		locked, err := isLocked(f)
		var rec record
		if err == nil && locked {
			rec, err = readStable(f)
		}
		f.Close()
		if err == nil && locked && rec.Limit > 0 {
			return rec.Limit
		}
	}
}

// slotsFull reports, without taking any lock, whether the semaphore seems
// to have all req.Limit slots held with the same limit.
func (s *Store) slotsFull(cpath string, req fence.Request) bool {
	if readCounter(cpath).Limit != req.Limit {
		return false // decide under the counter's lock
	}
	for i := range req.Limit {
		if !lockedReadOnly(s.slotPath(req.Key, i), false) {
			return false
		}
	}
	return true
}

// grantKind issues the next token from the locked counter c for a holder
// that has just locked f, and records the holder in f. On failure it
// unlocks and closes f.
func (s *Store) grantKind(c *counter, f *os.File, req fence.Request, kind string) (*claim, error) {
	token, err := c.issue()
	if err == nil {
		now := time.Now().Round(0)
		err = writeRecord(f, record{Key: req.Key, Kind: kind, Token: token, Limit: req.Limit, Owner: req.Owner,
			Host: hostname, PID: pid, AcquiredAt: &now, Meta: req.Meta}, false)
	}
	if err != nil {
		unlock(f)
		f.Close()
		return nil, err
	}
	return &claim{f: f, path: f.Name(), key: req.Key, owner: req.Owner, token: token, kind: kind}, nil
}

// acquireRW takes the read or the write side of the reader-writer lock
// req.Key. The policy prefers writers (rwpref.Decide): a writer that finds
// the key held records its intent in the counter file for
// rwpref.Intent(TTL), renewed by each attempt while it waits, and new
// readers are refused while the intent lasts. A writer that gives up lets
// it lapse.
func (s *Store) acquireRW(req fence.Request) (fence.Claim, error) {
	path := s.kindPath(req.Key, kindRW)
	cpath := s.kindPath(req.Key, kindRW+countSuffix)
	write := req.Kind == fence.KindWrite
	if testsLocks {
		// Refuse a held key without opening the lock file for writing:
		// closing it would wake every waiter watching the key.
		if write && lockedReadOnly(path, false) {
			return s.writerWaits(cpath, path, req)
		}
		if !write {
			if h := s.readersKeptOut(cpath, path, req.Key, time.Now()); h != nil {
				return nil, h
			}
		}
	}
	c, err := s.lockCounter(cpath, req.Key, kindRW)
	if err != nil {
		return nil, fmt.Errorf("fencefile: acquire %s %q: %w", req.Kind, req.Key, err)
	}
	defer c.close()
	now := time.Now()
	marked := c.rec.WriterWaits != nil && now.Before(*c.rec.WriterWaits)
	if rwpref.Decide(write, rwpref.Lock{WriterWaits: marked}) == rwpref.Refuse {
		return nil, &fence.HeldError{Key: req.Key, Holder: &fence.Holder{Key: req.Key, ExpiresIn: c.rec.WriterWaits.Sub(now)}}
	}
	f, err := s.openFile(path)
	if err != nil {
		return nil, fmt.Errorf("fencefile: acquire %s %q: %w", req.Kind, req.Key, err)
	}
	var ok bool
	if write {
		ok, err = tryLock(f)
	} else {
		ok, err = tryLockShared(f)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("fencefile: acquire %s %q: %w", req.Kind, req.Key, err)
	}
	if !ok {
		h := heldBy(f, req.Key)
		f.Close()
		// Held against us: by a writer or, for a writer, maybe by readers,
		// which Decide treats alike.
		if rwpref.Decide(write, rwpref.Lock{Writer: true}) == rwpref.Intend {
			if err := c.intend(now, req.TTL); err != nil {
				return nil, fmt.Errorf("fencefile: acquire %s %q: %w", req.Kind, req.Key, err)
			}
		}
		return nil, &fence.HeldError{Key: req.Key, Holder: h}
	}
	if !write {
		token, err := c.issue()
		if err != nil {
			unlock(f)
			f.Close()
			return nil, fmt.Errorf("fencefile: acquire read %q: %w", req.Key, err)
		}
		return &claim{f: f, path: path, key: req.Key, owner: req.Owner, token: token, kind: kindRW, shared: true}, nil
	}
	c.rec.WriterWaits = nil
	cl, err := s.grantKind(c, f, req, kindRW)
	if err != nil {
		return nil, fmt.Errorf("fencefile: acquire write %q: %w", req.Key, err)
	}
	return cl, nil
}

// writerWaits records a writer's intent for a key found held, and refuses
// the writer.
func (s *Store) writerWaits(cpath, path string, req fence.Request) (fence.Claim, error) {
	c, err := s.lockCounter(cpath, req.Key, kindRW)
	if err != nil {
		return nil, fmt.Errorf("fencefile: acquire write %q: %w", req.Key, err)
	}
	defer c.close()
	if err := c.intend(time.Now(), req.TTL); err != nil {
		return nil, fmt.Errorf("fencefile: acquire write %q: %w", req.Key, err)
	}
	var h *fence.Holder
	if f, err := os.Open(path); err == nil {
		h = heldBy(f, req.Key)
		f.Close()
	}
	return nil, &fence.HeldError{Key: req.Key, Holder: h}
}

// intend records, in the locked counter file, that a writer waits.
func (c *counter) intend(now time.Time, ttl time.Duration) error {
	until := now.Add(rwpref.Intent(ttl)).Round(0)
	c.rec.WriterWaits = &until
	if err := writeRecord(c.f, c.rec, false); err != nil {
		return fmt.Errorf("write counter file %s: %w", c.f.Name(), err)
	}
	return nil
}

// readersKeptOut returns the error refusing a reader, without taking any
// lock, if a writer holds the key or waits for it; nil if the reader may
// try under the counter's lock.
func (s *Store) readersKeptOut(cpath, path, key string, now time.Time) error {
	if lockedReadOnly(path, true) {
		var h *fence.Holder
		if f, err := os.Open(path); err == nil {
			h = heldBy(f, key)
			f.Close()
		}
		return &fence.HeldError{Key: key, Holder: h}
	}
	if rec := readCounter(cpath); rec.WriterWaits != nil && now.Before(*rec.WriterWaits) {
		// The reader's wait ends when the intent lapses, if no writer
		// renews it.
		return &fence.HeldError{Key: key, Holder: &fence.Holder{Key: key, ExpiresIn: rec.WriterWaits.Sub(now)}}
	}
	return nil
}

// isWakingFile reports whether name is one of the files of key base (a lock
// file name without ".lock") whose release wakes waiters: a lock, slot or
// reader-writer lock file, not a counter file.
func isWakingFile(name, base string) bool {
	rest, ok := strings.CutPrefix(name, base+".")
	return ok && !strings.HasSuffix(rest, countSuffix)
}
