package fencefile

import (
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// Who may use a store's files. A lock file names its holder (owner id,
// host, pid), and anyone who can open it for reading can also block its
// key for ever with a shared lock; anyone who can write the directory can
// delete, replace or squat lock files. So only the directory's owner, and
// the members of its group where it grants its group access, may read or
// write the files: they take the directory's group read and write bits and
// its group (0600 in a private directory, 0660 in a shared one), never any
// access for others. A directory shares its files with its group when it
// is group-writable or setgid; mkdir's usual 0755 does not. A directory
// others may write to is refused; one they may only list or enter is
// accepted, since they can open none of its files (they see the names:
// the readable part of the keys).

// Warnings returns what the store's directory lets others do that it
// should not, for the caller to show: a directory other users may list
// or enter (mkdir's usual 0755) shows them the readable part of every
// key, the first 48 bytes escaped, in its file names, though they can
// open none of its files. Nil for a directory closed to others (0700,
// 2770). The fence command prints these as warnings.
func (s *Store) Warnings() []string {
	if perm := s.access.dirMode.Perm(); perm&0o005 != 0 {
		return []string{fmt.Sprintf("store directory %s has mode %04o: other users can list it and read key names "+
			"(up to %d bytes of each) from its file names, though not its files; chmod o-rx %s keeps them out",
			s.dir, unixMode(s.access.dirMode), maxReadable, s.dir)}
	}
	return nil
}

// dirAccess is what a store's directory looked like when it was opened: the
// mode and group its files get, and what to recreate it with should it
// vanish.
type dirAccess struct {
	filePerm fs.FileMode // 0600, plus the group read/write bits of a shared directory
	dirMode  fs.FileMode // the directory's permission and setgid bits
	gid      int         // the directory's group, -1 if unknown
}

// checkDir decides whether the directory fi may hold a store, and how its
// files are made.
func checkDir(dir string, fi fs.FileInfo) (dirAccess, error) {
	perm := fi.Mode().Perm()
	if perm&0o002 != 0 {
		return dirAccess{}, fmt.Errorf("store directory %s has mode %04o (%v): other users could delete, replace or squat its lock files; "+
			"run chmod o-w %s (chmod 700 for one user, 2770 for a group: see docs/file.md)", dir, unixMode(fi.Mode()), fi.Mode(), dir)
	}
	a := dirAccess{filePerm: 0o600, dirMode: perm | fi.Mode()&fs.ModeSetgid, gid: -1}
	if perm&0o020 != 0 || fi.Mode()&fs.ModeSetgid != 0 {
		// Shared with the group on purpose (mkdir's usual 0755 is not):
		// files get the directory's group read and write bits.
		a.filePerm |= perm & 0o060
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		a.gid = int(st.Gid)
	}
	return a, nil
}

// unixMode returns the mode's permission, setuid, setgid and sticky bits
// as chmod writes them.
func unixMode(m fs.FileMode) uint32 {
	u := uint32(m.Perm())
	if m&fs.ModeSetuid != 0 {
		u |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		u |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		u |= 0o1000
	}
	return u
}

// fixMode gives the file f the store's file mode and group: a new file
// lost bits to the umask and took its creator's group, an old one may
// have been made by an earlier version of fence (0666 less the umask) or
// by hand.
func (s *Store) fixMode(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%v); remove it", f.Name(), fi.Mode().Type())
	}
	if err := s.fixGroup(f, fi); err != nil {
		return err
	}
	want := s.access.filePerm
	if fi.Mode().Perm() == want {
		return nil
	}
	err = f.Chmod(want)
	if err == nil || fi.Mode().Perm()&^want == 0 {
		// A mode narrower than the store's that cannot be widened only
		// keeps other group members out: they are told so when they open
		// the file.
		return nil
	}
	owner := -1
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		owner = int(st.Uid)
	}
	return fmt.Errorf("%s has mode %04o, which gives access beyond the store's %04o, and this user cannot change it (%w); "+
		"its owner (uid %d) or root must run chmod %04o %s (see docs/file.md)", f.Name(), unixMode(fi.Mode()), want, err, owner, want, f.Name())
}

// fixGroup gives f the directory's group, where the directory shares its
// files with its group: without setgid, a new file takes its creator's
// group. Only the file's owner can change it, as a member of that group;
// a file it cannot change is left to fixMode's checks.
func (s *Store) fixGroup(f *os.File, fi fs.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || s.access.gid < 0 || s.access.filePerm&0o060 == 0 || int(st.Gid) == s.access.gid || int(st.Uid) != os.Geteuid() {
		return nil
	}
	if err := f.Chown(-1, s.access.gid); err != nil {
		return fmt.Errorf("give %s the group of its directory (gid %d): %w; this user must be a member of it (see docs/file.md)", f.Name(), s.access.gid, err)
	}
	return nil
}
