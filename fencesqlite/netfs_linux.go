package fencesqlite

import "golang.org/x/sys/unix"

// networkFS returns the name of the network or user-space file system dir
// is on, as statfs reports its type, or "" for any other (or if statfs
// fails: opening the database then reports the real problem).
func networkFS(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return ""
	}
	return fsName(int64(st.Type))
}

// fsName names the file system types on which SQLite's locks or its WAL
// shared memory do not keep processes (let alone hosts) apart.
func fsName(magic int64) string {
	switch uint32(magic) {
	case unix.NFS_SUPER_MAGIC:
		return "NFS"
	case unix.SMB_SUPER_MAGIC, unix.SMB2_SUPER_MAGIC, unix.CIFS_SUPER_MAGIC:
		return "SMB/CIFS"
	case unix.V9FS_MAGIC:
		return "9p"
	case unix.FUSE_SUPER_MAGIC:
		return "FUSE (sshfs, s3fs, gcsfuse and the like)"
	case unix.CEPH_SUPER_MAGIC:
		return "CephFS"
	case unix.AFS_SUPER_MAGIC, unix.AFS_FS_MAGIC:
		return "AFS"
	case unix.CODA_SUPER_MAGIC:
		return "Coda"
	case unix.NCP_SUPER_MAGIC:
		return "NetWare (NCP)"
	case 0x0bd00bd0:
		return "Lustre"
	case 0x01161970:
		return "GFS2"
	case 0x7461636f:
		return "OCFS2"
	}
	return ""
}
