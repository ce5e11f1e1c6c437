package nfsv41

import (
	"sync"
	"time"

	"hushfs/internal/nfs4"
	"hushfs/internal/proto"
)

// The mount's own COMPOUND (walkExport) asks for the export's space
// attributes beside its limits, and a statfs right after the mount is
// answered from them. A tool that walks the tree right after mounting
// (grep -r, find, du through fts) asks statfs of the export once as it
// starts: that was a COMPOUND of its own, the only one of a grep -r not
// carrying a file.
//
// Kept at most spaceKeep after the mount's COMPOUND was sent, and only
// until the mount sends anything that may change the file system (a
// COMPOUND that is not idempotent: a write, create, remove, or an OPEN or
// CLOSE), so a df after our own write always asks the server, as Linux's
// nfs_statfs does at every call. Another client's change shows within
// spaceKeep: far less than the attribute cache keeps a file's size
// (acregmin, 3 s). The root's attributes are not handed back with it
// (they are older than the call; the core would take them for new).
const spaceKeep = time.Second

// spaceCache is the space attributes the mount's COMPOUND brought.
type spaceCache struct {
	mu   sync.Mutex
	res  *proto.FsStatRes // GUARDED_BY(mu); nil: none, or no longer good
	at   time.Time        // GUARDED_BY(mu): when the COMPOUND was sent
	fsid proto.Fsid       // GUARDED_BY(mu): the export root's file system
}

var _ proto.SpaceKnower = (*Server)(nil)

// KnownFsStat answers a statfs of a file on the export root's file system
// from what the mount's COMPOUND brought, while that is good
// (proto.SpaceKnower); the core knows which file system a file is on.
func (s *Server) KnownFsStat(fsid proto.Fsid) (proto.FsStatRes, bool) {
	return s.space.get(s.now(), fsid)
}

// keep records the space attributes f of the export root, from a
// COMPOUND sent at at.
func (c *spaceCache) keep(f *nfs4.Fattr, at time.Time) {
	if !f.Mask.Has(nfs4.AttrFsid) {
		return
	}
	for _, a := range []int{nfs4.AttrSpaceTotal, nfs4.AttrSpaceFree, nfs4.AttrSpaceAvail,
		nfs4.AttrFilesTotal, nfs4.AttrFilesFree, nfs4.AttrFilesAvail} {
		if !f.Mask.Has(a) {
			return // a server without them: FSSTAT asks, and says so
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.res = &proto.FsStatRes{Tbytes: f.SpaceTotal, Fbytes: f.SpaceFree, Abytes: f.SpaceAvail,
		Tfiles: f.FilesTotal, Ffiles: f.FilesFree, Afiles: f.FilesAvail}
	c.at, c.fsid = at, proto.Fsid{Major: f.Fsid.Major, Minor: f.Fsid.Minor}
}

// forget drops them: something that may change the file system is sent.
func (c *spaceCache) forget() {
	c.mu.Lock()
	c.res = nil
	c.mu.Unlock()
}

// get returns them for the file system fsid if still good at now.
func (c *spaceCache) get(now time.Time, fsid proto.Fsid) (proto.FsStatRes, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.res != nil && (now.Sub(c.at) >= spaceKeep || now.Before(c.at)) {
		c.res = nil
	}
	if c.res == nil || fsid != c.fsid {
		return proto.FsStatRes{}, false
	}
	return *c.res, true
}
