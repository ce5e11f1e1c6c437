package fusefs

import (
	"github.com/hanwen/go-fuse/v2/fuse"

	"hushfs/internal/client"
)

// NFSv3 has no extended attributes: every attribute is absent and none
// can be set. The statistics are on the mount's control socket
// (control.go).

// GetXAttr: no attribute exists.
func (fs *FS) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	fs.requests.add("getxattr")
	return 0, fuse.ENODATA
}

// ListXAttr lists nothing.
func (fs *FS) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	fs.requests.add("listxattr")
	return 0, fuse.OK
}

// SetXAttr: nothing can be set.
func (fs *FS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	fs.requests.add("setxattr")
	return fuse.ENOTSUP
}

// RemoveXAttr: there are no attributes to remove.
func (fs *FS) RemoveXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	fs.requests.add("removexattr")
	return fuse.ENOTSUP
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
