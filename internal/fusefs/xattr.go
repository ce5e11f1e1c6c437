package fusefs

import (
	"encoding/json"

	"github.com/hanwen/go-fuse/v2/fuse"

	"hushfs/internal/client"
)

// StatsXAttr is the extended attribute of the mount's root that holds the
// RPC statistics as JSON (client.Snapshot); setting it to StatsReset
// zeroes them.
const (
	StatsXAttr = "user.hushfs.stats"
	StatsReset = "reset"
)

// GetXAttr serves the statistics on the root; every other attribute is
// absent. NFSv3 has no extended attributes.
func (fs *FS) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	fs.requests.add("getxattr")
	if h.NodeId != uint64(client.RootID) || attr != StatsXAttr {
		return 0, fuse.ENODATA
	}
	b, err := json.Marshal(fs.Stats())
	if err != nil {
		fs.logf("hushfs: encoding statistics: %v", err)
		return 0, fuse.EIO
	}
	if len(dest) < len(b) {
		// A size query (empty buffer) or too small a buffer: the
		// caller learns the size now; the next snapshot may be larger,
		// which getxattr(2) callers handle by asking again.
		return uint32(len(b)), fuse.ERANGE
	}
	return uint32(copy(dest, b)), fuse.OK
}

// ListXAttr lists nothing: the statistics attribute is not listed, so tools
// copying attributes (cp -a, rsync -X) never copy it.
func (fs *FS) ListXAttr(cancel <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	fs.requests.add("listxattr")
	return 0, fuse.OK
}

// SetXAttr resets the statistics when the root's StatsXAttr is set to
// StatsReset by root or the mounting user; nothing else can be set.
func (fs *FS) SetXAttr(cancel <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	fs.requests.add("setxattr")
	if in.NodeId != uint64(client.RootID) || attr != StatsXAttr {
		return fuse.ENOTSUP
	}
	if string(data) != StatsReset {
		return fuse.EINVAL
	}
	if in.Uid != 0 && in.Uid != fs.owner {
		return fuse.EPERM
	}
	fs.ResetStats()
	return fuse.OK
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
