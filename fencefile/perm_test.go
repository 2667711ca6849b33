package fencefile_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fencing/fence/fencefile"
)

// Who may touch a store's files: the directory's owner, and the members of
// its group where the directory is shared with one; other users never.

// acquireEveryKind takes and releases key once in every kind (and breaks
// one lock), so that every kind of file the store makes exists.
func acquireEveryKind(t *testing.T, s *fencefile.Store, key string) {
	t.Helper()
	ctx := context.Background()
	for _, kc := range kindCases {
		c := tryKind(t, s, key, "o", kc.kind, kc.limit)
		if err := c.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c := mustAcquire(t, s, key+"/broken", "o")
	if err := s.Delete(key + "/broken"); err != nil {
		t.Fatal(err)
	}
	c.Release(ctx)
}

// fileModes returns the mode of every file in dir, by name.
func fileModes(t *testing.T, dir string) map[string]fs.FileInfo {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	infos := map[string]fs.FileInfo{}
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		infos[e.Name()] = fi
	}
	return infos
}

// Files of a private store are 0600 whatever the umask, so no other user
// can read holders' ids or block a key with a shared lock.
func TestFilesArePrivate(t *testing.T) {
	s := newStore(t)
	acquireEveryKind(t, s, "k")
	infos := fileModes(t, s.Dir())
	if len(infos) < 6 {
		t.Fatalf("only %d files: %v", len(infos), infos)
	}
	for name, fi := range infos {
		if fi.Mode() != 0o600 {
			t.Errorf("%s: mode %v; want -rw-------", name, fi.Mode())
		}
	}
}

// A lock file left with a looser mode (by an earlier version of fence, or
// by hand) is tightened by the next acquisition of its key, whatever kind.
func TestLooseFilesTightened(t *testing.T) {
	s := newStore(t)
	acquireEveryKind(t, s, "k")
	for name := range fileModes(t, s.Dir()) {
		if err := os.Chmod(filepath.Join(s.Dir(), name), 0o666); err != nil {
			t.Fatal(err)
		}
	}
	acquireEveryKind(t, s, "k")
	for name, fi := range fileModes(t, s.Dir()) {
		if fi.Mode() != 0o600 {
			t.Errorf("%s: mode %v after an acquisition; want it tightened to -rw-------", name, fi.Mode())
		}
	}
}

// A store directory other users can write to is refused, with an error
// that names the directory, its mode and the fix.
func TestWritableDirectoryRefused(t *testing.T) {
	for _, mode := range []fs.FileMode{0o777, 0o1777, 0o707, 0o703, 0o702, 0o2777, 0o772} {
		dir := filepath.Join(t.TempDir(), "store")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, toOSMode(mode)); err != nil {
			t.Fatal(err)
		}
		s, err := fencefile.New(dir)
		if err == nil {
			t.Errorf("mode %04o: New succeeded (files then %v)", mode, modeOfNewFile(t, s))
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, dir) || !strings.Contains(msg, "chmod o-w") || !strings.Contains(msg, "docs/file.md") ||
			!strings.Contains(msg, fmt.Sprintf("mode %04o", mode)) {
			t.Errorf("mode %04o: error %q; want the directory, its mode, what to run and where to read more", mode, msg)
		}
	}
}

// Directory modes that are accepted, and the mode of the files made in
// them, whatever the umask: never any access for others, and the
// directory's group read and write access where it shares its files with
// its group (group-writable or setgid), none where it does not (mkdir's
// usual 0755, which is accepted, with a warning from Warnings: others can
// open none of its files, but read key names from their names).
func TestDirectoryModeGivesFileMode(t *testing.T) {
	for _, tc := range []struct {
		dir   fs.FileMode
		file  fs.FileMode
		warns bool // others may list or enter the directory
	}{
		{0o700, 0o600, false},
		{0o755, 0o600, true},
		{0o711, 0o600, true},
		{0o750, 0o600, false},
		{0o770, 0o660, false},
		{0o775, 0o660, true},
		{0o2770, 0o660, false},
		{0o2775, 0o660, true},
		{0o2750, 0o640, false},
	} {
		dir := filepath.Join(t.TempDir(), "store")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, toOSMode(tc.dir)); err != nil {
			t.Fatal(err)
		}
		s, err := fencefile.New(dir)
		if err != nil {
			t.Errorf("directory mode %04o: %v", tc.dir, err)
			continue
		}
		acquireEveryKind(t, s, "k")
		for name, fi := range fileModes(t, dir) {
			if fi.Mode() != tc.file {
				t.Errorf("directory mode %04o: %s has mode %v; want %v", tc.dir, name, fi.Mode(), tc.file)
			}
		}
		if w := s.Warnings(); (len(w) > 0) != tc.warns {
			t.Errorf("directory mode %04o: Warnings() = %q; want a warning: %v (others can list or enter it)", tc.dir, w, tc.warns)
		}
	}
}

// A group-shared directory (2770, or 0770: setgid only spares fence a
// chown) gives its files its group, readable and writable by the group
// (0660) whatever the umask; deleted, it comes back as it was.
func TestGroupSharedDirectory(t *testing.T) {
	gid := os.Getgid()
	if os.Geteuid() == 0 {
		gid = sharedGID // root can hand the directory to any group
	}
	for _, mode := range []fs.FileMode{0o770 | fs.ModeSetgid, 0o770} {
		dir := filepath.Join(t.TempDir(), "store")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, -1, gid); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		s, err := fencefile.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		acquireEveryKind(t, s, "k")
		for name, fi := range fileModes(t, dir) {
			if fi.Mode() != 0o660 || int(fi.Sys().(*syscall.Stat_t).Gid) != gid {
				t.Errorf("directory %v: %s has mode %v group %d; want -rw-rw---- and group %d", mode, name, fi.Mode(), fi.Sys().(*syscall.Stat_t).Gid, gid)
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
		c := mustAcquire(t, s, "k", "o")
		c.Release(context.Background())
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode() != fs.ModeDir|mode || int(fi.Sys().(*syscall.Stat_t).Gid) != gid {
			t.Errorf("recreated directory: %v, %v; want %v and group %d", fi.Mode(), err, fs.ModeDir|mode, gid)
		}
	}
}

// Users of one group share a store in a group-shared directory, with one
// token sequence; a user outside the group cannot use it at all, and a
// lock file another user left readable by everyone is refused, not used.
// The users' own groups are not the directory's, nor is it setgid: the
// store gives each file the directory's group. Run as root, which starts
// the users' processes; skipped otherwise.
func TestUsersShareGroupDirectory(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to run processes as other users")
	}
	const userA, userB, outsider = 65501, 65502, 65503
	top := t.TempDir()
	// Other users must reach the test binary and the store through top.
	for _, d := range []string{filepath.Dir(top), top} {
		if err := os.Chmod(d, 0o711); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(top, "fencefile.test")
	copyFile(t, os.Args[0], bin, 0o755)
	dir := filepath.Join(top, "store")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, -1, sharedGID); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o770); err != nil {
		t.Fatal(err)
	}

	tokA, stderr, err := holdAs(t, bin, dir, "shared", userA, sharedGID)
	if err != nil {
		t.Fatalf("user A: %v: %s", err, stderr)
	}
	tokB, stderr, err := holdAs(t, bin, dir, "shared", userB, sharedGID)
	if err != nil {
		t.Fatalf("user B, after user A: %v: %s", err, stderr)
	}
	if tokB <= tokA {
		t.Errorf("user B's token %d not above user A's %d", tokB, tokA)
	}
	if _, stderr, err := holdAs(t, bin, dir, "shared", outsider, -1); err == nil || !strings.Contains(stderr, "permission denied") {
		t.Errorf("a user outside the group: %v, %q; want permission denied", err, stderr)
	}

	// A lock file of user A's left readable by everyone: user B may not
	// change its mode, and refuses to use it.
	if _, stderr, err := holdAs(t, bin, dir, "loose", userA, sharedGID); err != nil {
		t.Fatalf("user A: %v: %s", err, stderr)
	}
	s, err := fencefile.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(s.Path("loose"), 0o664); err != nil {
		t.Fatal(err)
	}
	_, stderr, err = holdAs(t, bin, dir, "loose", userB, sharedGID)
	if err == nil || !strings.Contains(stderr, s.Path("loose")) || !strings.Contains(stderr, "chmod 0660") {
		t.Errorf("user B on a world-readable lock file of user A's: %v, %q; want a refusal naming the file and the fix", err, stderr)
	}
}

// sharedGID is the group the tests run as root share directories with.
const sharedGID = 65500

// holdAs runs a holder process as user uid, whose own group is uid and
// who is also a member of group (unless it is -1), that acquires key in
// dir; and kills it once it has reported its token. err is set when it
// failed to acquire; stderr is what it said.
func holdAs(t *testing.T, bin, dir, key string, uid, group int) (token int64, stderr string, err error) {
	t.Helper()
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid), Groups: []uint32{}}
	if group >= 0 {
		cred.Groups = []uint32{uint32(group)}
	}
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), holderEnv+"="+dir, holderKeyEnv+"="+key)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var errBuf bytes.Buffer
	cmd.Stderr = &errBuf
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := fmt.Fscanf(out, "token %d\n", &token)
		done <- err
	}()
	select {
	case err = <-done:
		if err != nil {
			err = fmt.Errorf("holder as uid %d exited without a token: %w", uid, err)
		}
	case <-time.After(30 * time.Second):
		err = fmt.Errorf("holder as uid %d said nothing for 30s", uid)
	}
	cmd.Process.Kill()
	cmd.Wait()
	return token, errBuf.String(), err
}

func copyFile(t *testing.T, from, to string, mode fs.FileMode) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}

// toOSMode turns unix mode bits (setgid 02000, sticky 01000) into an
// fs.FileMode for os.Chmod.
func toOSMode(m fs.FileMode) fs.FileMode {
	out := m & fs.ModePerm
	if m&0o2000 != 0 || m&fs.ModeSetgid != 0 {
		out |= fs.ModeSetgid
	}
	if m&0o1000 != 0 || m&fs.ModeSticky != 0 {
		out |= fs.ModeSticky
	}
	return out
}

// modeOfNewFile reports the mode of a lock file s makes, for a message.
func modeOfNewFile(t *testing.T, s *fencefile.Store) fs.FileMode {
	c, err := s.TryAcquire(context.Background(), req("probe", "o"))
	if err != nil {
		return 0
	}
	defer c.Release(context.Background())
	fi, err := os.Stat(s.Path("probe"))
	if err != nil {
		return 0
	}
	return fi.Mode()
}
