package fencefile

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"strconv"
	"time"

	"github.com/fencing/fence"
)

// record is what a lock file holds: the key's token counter, kept across
// releases and restarts, and the current holder, empty once released.
// Only the holder of the file's lock writes it.
type record struct {
	Version    int               `json:"fence_file"`
	Key        string            `json:"key"`
	Token      int64             `json:"token"`
	Owner      string            `json:"owner,omitempty"`
	Host       string            `json:"host,omitempty"`
	PID        int               `json:"pid,omitempty"`
	AcquiredAt *time.Time        `json:"acquired_at,omitempty"`
	Meta       map[string]string `json:"meta,omitempty"`

	// Kind names the kind of the file, for the files of semaphores and
	// reader-writer locks (see kinds.go); empty for a lock file.
	Kind string `json:"kind,omitempty"`
	// Limit, in a semaphore's counter file and slot files, is the limit its
	// holders were granted with.
	Limit int `json:"limit,omitempty"`
	// WriterWaits, in a reader-writer lock's counter file, keeps new
	// readers out until then: a waiting writer's intent.
	WriterWaits *time.Time `json:"writer_waits,omitempty"`
}

const recordVersion = 1

// maxRecord bounds what is read of a lock file: a record holds at most a
// key of fence.MaxKeyLen bytes, escaped, and the holder's metadata.
const maxRecord = 1 << 20

var (
	errEmptyRecord   = errors.New("empty lock file")
	errCorruptRecord = errors.New("corrupt lock file")
)

// readRecord reads the record at the start of f. An empty file (a key
// never acquired) returns errEmptyRecord. Only the first JSON value
// counts: a writer that died between writing a shorter record and
// truncating the file leaves a tail that is ignored.
func readRecord(f *os.File) (record, error) {
	buf, err := io.ReadAll(io.NewSectionReader(f, 0, maxRecord))
	if err != nil {
		return record{}, err
	}
	if len(bytes.TrimSpace(buf)) == 0 {
		return record{}, errEmptyRecord
	}
	var rec record
	if err := json.NewDecoder(bytes.NewReader(buf)).Decode(&rec); err != nil {
		return record{}, fmt.Errorf("%w %s: %w", errCorruptRecord, f.Name(), err)
	}
	if rec.Version != recordVersion {
		return record{}, fmt.Errorf("%w %s: unknown record version %d", errCorruptRecord, f.Name(), rec.Version)
	}
	return rec, nil
}

// writeRecord replaces the record in f: it writes the new record over the
// old one, then cuts the file to its length, so that at no moment is the
// file without a readable token counter. With sync, the record reaches the
// disk before writeRecord returns.
func writeRecord(f *os.File, rec record, sync bool) error {
	rec.Version = recordVersion
	buf, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	buf = append(buf, '\n')
	if _, err := f.WriteAt(buf, 0); err != nil {
		return err
	}
	if err := f.Truncate(int64(len(buf))); err != nil {
		return err
	}
	if sync {
		return f.Sync()
	}
	return nil
}

// nextToken returns the token that follows a counter at prev (0 for a
// counter that is missing or unreadable): max(prev+1, the wall clock in
// microseconds since 1970). The counter keeps tokens growing while it
// exists; the clock once it is gone, provided the clock now reads later
// than the last token issued before the loss (docs/file.md). It fails
// rather than wrap past the largest int64.
func nextToken(prev int64) (int64, error) {
	if prev == math.MaxInt64 {
		return 0, fmt.Errorf("token counter at %d, the largest int64, cannot grow", prev)
	}
	t := max(prev+1, time.Now().UnixMicro())
	if t <= 0 {
		return 0, fmt.Errorf("no positive token after %d: the clock reads before 1970", prev)
	}
	return t, nil
}

// holder returns the fence.Holder a record describes. Its Meta holds the
// caller's metadata plus "host", "pid" and "acquired_at" (RFC 3339).
func (r record) holder() fence.Holder {
	meta := maps.Clone(r.Meta)
	if meta == nil {
		meta = make(map[string]string, 3)
	}
	if _, ok := meta["host"]; !ok && r.Host != "" {
		meta["host"] = r.Host
	}
	if _, ok := meta["pid"]; !ok && r.PID != 0 {
		meta["pid"] = strconv.Itoa(r.PID)
	}
	if r.AcquiredAt != nil {
		meta["acquired_at"] = r.AcquiredAt.Format(time.RFC3339Nano)
	}
	return fence.Holder{Key: r.Key, Owner: r.Owner, Token: r.Token, Meta: meta}
}
