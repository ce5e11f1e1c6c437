package fusefs

import (
	"github.com/hanwen/go-fuse/v2/fuse"

	"hushfs/internal/client"
)

// NFSv3 has no extended attributes, and a mount has none. The four xattr
// requests answer ENOSYS, which the kernel remembers for the connection
// (fs/fuse/xattr.c: no_getxattr, no_listxattr, no_setxattr,
// no_removexattr) and from then on answers EOPNOTSUPP itself: one request
// each per mount, instead of a getxattr of security.* or a POSIX ACL on
// every stat of ls -l and before every write. ENODATA would keep the kernel
// asking. The statistics, which used to be an attribute of the root, are
// on the mount's control socket (control.go).

// GetXAttr: no attributes (the kernel stops asking).
func (fs *FS) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	fs.requests.add("getxattr")
	return 0, fuse.ENOSYS
}

// ListXAttr: no attributes (the kernel stops asking).
func (fs *FS) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	fs.requests.add("listxattr")
	return 0, fuse.ENOSYS
}

// SetXAttr: nothing can be set (the kernel stops asking).
func (fs *FS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	fs.requests.add("setxattr")
	return fuse.ENOSYS
}

// RemoveXAttr: nothing to remove (the kernel stops asking).
func (fs *FS) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	fs.requests.add("removexattr")
	return fuse.ENOSYS
}

// Stats returns the mount's statistics: the core's RPC counters, the
// daemon's version and the kernel's requests by operation.
func (fs *FS) Stats() client.Snapshot {
	snap := fs.core.Stats().Snapshot()
	snap.Version = fs.version
	snap.FUSE = fs.requests.snapshot()
	return snap
}

// ResetStats zeroes the RPC counters and the request counts.
func (fs *FS) ResetStats() {
	fs.core.Stats().Reset()
	fs.requests.reset()
}
