package fencesqlite_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/fencing/fence/fencesqlite"
)

func TestNetworkFileSystemsNamed(t *testing.T) {
	for _, magic := range []int64{unix.NFS_SUPER_MAGIC, unix.SMB_SUPER_MAGIC, unix.SMB2_SUPER_MAGIC,
		unix.CIFS_SUPER_MAGIC, unix.V9FS_MAGIC, unix.FUSE_SUPER_MAGIC, unix.CEPH_SUPER_MAGIC} {
		if fencesqlite.FSName(magic) == "" {
			t.Errorf("file system type %#x not taken for a network file system", magic)
		}
	}
	for _, magic := range []int64{unix.EXT4_SUPER_MAGIC, unix.TMPFS_MAGIC, unix.XFS_SUPER_MAGIC,
		unix.BTRFS_SUPER_MAGIC, unix.OVERLAYFS_SUPER_MAGIC} {
		if name := fencesqlite.FSName(magic); name != "" {
			t.Errorf("local file system type %#x taken for %s", magic, name)
		}
	}
	// The test's own temporary directory is local.
	s, err := fencesqlite.Open(filepath.Join(t.TempDir(), "a.db"))
	if errors.Is(err, fencesqlite.ErrNetworkFS) {
		t.Skipf("the temporary directory is on a network file system: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// On a FUSE mount, when there is one to try (such as /dev/fuse mounts of
// the host), Open refuses, and AllowNetworkFS overrides it.
func TestNetworkFileSystemRefused(t *testing.T) {
	mounts, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Skip("no /proc/self/mounts")
	}
	for _, line := range strings.Split(string(mounts), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || !(strings.HasPrefix(f[2], "nfs") || f[2] == "cifs" || f[2] == "9p" || strings.HasPrefix(f[2], "fuse")) {
			continue
		}
		s, err := fencesqlite.Open(filepath.Join(f[1], "fencesqlite-test.db"))
		if err == nil {
			s.Close()
		}
		if !errors.Is(err, fencesqlite.ErrNetworkFS) {
			t.Errorf("Open on %s (%s): %v; want ErrNetworkFS", f[1], f[2], err)
		}
		return
	}
	t.Skip("no network or FUSE mount on this machine to try")
}
