package fusefs

import (
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"hushfs/internal/client"
)

// fillAttr converts the core's attributes for the kernel.
func (fs *FS) fillAttr(out *fuse.Attr, a *client.Attr) {
	*out = fuse.Attr{
		Ino:       a.Ino,
		Size:      a.Size,
		Blocks:    a.Blocks,
		Atime:     uint64(a.Atime.Sec),
		Atimensec: a.Atime.Nsec,
		Mtime:     uint64(a.Mtime.Sec),
		Mtimensec: a.Mtime.Nsec,
		Ctime:     uint64(a.Ctime.Sec),
		Ctimensec: a.Ctime.Nsec,
		Mode:      a.Mode,
		Nlink:     a.Nlink,
		Owner:     fuse.Owner{Uid: a.UID, Gid: a.GID},
		Rdev:      a.Rdev,
		Blksize:   fs.blksize,
	}
}

// ttl clamps a lifetime for the kernel (never negative).
func ttl(d time.Duration) time.Duration { return max(d, 0) }

// fillEntry converts a positive entry. Generation stays 0: node IDs are
// never reused, so (nodeid, 0) is unique for the life of the mount.
func (fs *FS) fillEntry(out *fuse.EntryOut, e *client.Entry) {
	out.NodeId = uint64(e.Node)
	out.Generation = 0
	out.SetEntryTimeout(ttl(e.EntryTTL))
	out.SetAttrTimeout(ttl(e.AttrTTL))
	fs.fillAttr(&out.Attr, &e.Attr)
}

// entryStatus finishes a call that returns an entry.
func (fs *FS) entryStatus(out *fuse.EntryOut, e *client.Entry, err error) fuse.Status {
	if err != nil {
		return status(err)
	}
	fs.fillEntry(out, e)
	return fuse.OK
}

// Lookup resolves a name. A name the core says does not exist, with a time
// it may be remembered, is answered as a negative entry (node ID 0) so the
// kernel keeps a negative dentry for that long.
func (fs *FS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	rc := fs.request(cancel, h, "lookup")
	defer rc.finish()
	e, err := fs.core.Lookup(rc, fs.creds.cred(h), node(h.NodeId), name)
	if err != nil {
		if client.Errno(err) == syscall.ENOENT && e.EntryTTL > 0 {
			*out = fuse.EntryOut{}
			out.SetEntryTimeout(e.EntryTTL)
			return fuse.OK
		}
		return status(err)
	}
	fs.fillEntry(out, &e)
	return fuse.OK
}

// Forget drops the kernel's references (go-fuse splits BATCH_FORGET into
// one call per node).
func (fs *FS) Forget(nodeid, nlookup uint64) {
	fs.requests.add("forget")
	fs.core.Forget(node(nodeid), nlookup)
}

// GetAttr returns a node's attributes (the file handle, if any, adds
// nothing: attributes belong to the node).
func (fs *FS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	rc := fs.request(cancel, &in.InHeader, "getattr")
	defer rc.finish()
	a, d, err := fs.core.GetAttr(rc, fs.creds.cred(&in.InHeader), node(in.NodeId))
	if err != nil {
		return status(err)
	}
	out.SetTimeout(ttl(d))
	fs.fillAttr(&out.Attr, &a)
	return fuse.OK
}

// setAttrIn converts the kernel's SETATTR. A size change that names a file
// handle (ftruncate, or the truncation of an O_TRUNC open) is still a size
// change of the node; ctime and lock owner have no NFS counterpart (the
// server updates ctime itself). The kill-suid hint (a caller without
// CAP_FSETID truncating, or a change of owner) adds nothing on the wire:
// the server truncates and changes the owner as the caller, which clears
// the bits as locally; it keeps the core from dropping such a change as
// a no-op (client.SetAttrIn.KillSetID).
func setAttrIn(in *fuse.SetAttrIn) client.SetAttrIn {
	v := in.Valid
	var s client.SetAttrIn
	if v&fuse.FATTR_MODE != 0 {
		s.SetMode, s.Mode = true, in.Mode
	}
	if v&fuse.FATTR_UID != 0 {
		s.SetUID, s.UID = true, in.Uid
	}
	if v&fuse.FATTR_GID != 0 {
		s.SetGID, s.GID = true, in.Gid
	}
	if v&fuse.FATTR_SIZE != 0 {
		s.SetSize, s.Size = true, in.Size
	}
	setTime := func(set, now uint32, sec uint64, nsec uint32) client.SetTime {
		switch {
		case v&now != 0:
			return client.SetTime{How: client.TimeNow}
		case v&set != 0:
			return client.SetTime{How: client.TimeSet, Time: client.Timespec{Sec: int64(sec), Nsec: nsec}}
		}
		return client.SetTime{How: client.TimeOmit}
	}
	s.Atime = setTime(fuse.FATTR_ATIME, fuse.FATTR_ATIME_NOW, in.Atime, in.Atimensec)
	s.Mtime = setTime(fuse.FATTR_MTIME, fuse.FATTR_MTIME_NOW, in.Mtime, in.Mtimensec)
	s.KillSetID = v&fuse.FATTR_KILL_SUIDGID != 0
	return s
}

// SetAttr changes attributes (chmod, chown, truncate, utimes).
func (fs *FS) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	rc := fs.request(cancel, &in.InHeader, "setattr")
	defer rc.finish()
	a, d, err := fs.core.SetAttr(rc, fs.creds.cred(&in.InHeader), node(in.NodeId), setAttrIn(in))
	if err != nil {
		return status(err)
	}
	out.SetTimeout(ttl(d))
	fs.fillAttr(&out.Attr, &a)
	return fuse.OK
}

// Mknod creates a special file or, with S_IFREG, a regular file. The
// kernel has applied the umask already (no CAP_DONT_MASK).
func (fs *FS) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	rc := fs.request(cancel, &in.InHeader, "mknod")
	defer rc.finish()
	e, err := fs.core.Mknod(rc, fs.creds.cred(&in.InHeader), node(in.NodeId), name, in.Mode, in.Rdev)
	return fs.entryStatus(out, &e, err)
}

// Mkdir creates a directory.
func (fs *FS) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	rc := fs.request(cancel, &in.InHeader, "mkdir")
	defer rc.finish()
	e, err := fs.core.Mkdir(rc, fs.creds.cred(&in.InHeader), node(in.NodeId), name, in.Mode)
	return fs.entryStatus(out, &e, err)
}

// Unlink removes a name that is not a directory.
func (fs *FS) Unlink(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	rc := fs.request(cancel, h, "unlink")
	defer rc.finish()
	return status(fs.core.Unlink(rc, fs.creds.cred(h), node(h.NodeId), name))
}

// Rmdir removes an empty directory.
func (fs *FS) Rmdir(cancel <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	rc := fs.request(cancel, h, "rmdir")
	defer rc.finish()
	return status(fs.core.Rmdir(rc, fs.creds.cred(h), node(h.NodeId), name))
}

// Rename renames. NFSv3 RENAME always replaces its target, so neither
// RENAME_NOREPLACE nor RENAME_EXCHANGE can be honoured atomically: both are
// refused rather than emulated with a race.
func (fs *FS) Rename(cancel <-chan struct{}, in *fuse.RenameIn, oldName, newName string) fuse.Status {
	if in.Flags != 0 {
		return fuse.EINVAL
	}
	rc := fs.request(cancel, &in.InHeader, "rename")
	defer rc.finish()
	return status(fs.core.Rename(rc, fs.creds.cred(&in.InHeader), node(in.NodeId), oldName, node(in.Newdir), newName))
}

// Link makes a hard link to in.Oldnodeid in the request's directory.
func (fs *FS) Link(cancel <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	rc := fs.request(cancel, &in.InHeader, "link")
	defer rc.finish()
	e, err := fs.core.Link(rc, fs.creds.cred(&in.InHeader), node(in.Oldnodeid), node(in.NodeId), name)
	return fs.entryStatus(out, &e, err)
}

// Symlink creates linkName in the request's directory pointing at
// pointedTo.
func (fs *FS) Symlink(cancel <-chan struct{}, h *fuse.InHeader, pointedTo, linkName string, out *fuse.EntryOut) fuse.Status {
	rc := fs.request(cancel, h, "symlink")
	defer rc.finish()
	e, err := fs.core.Symlink(rc, fs.creds.cred(h), node(h.NodeId), linkName, pointedTo)
	return fs.entryStatus(out, &e, err)
}

// Readlink returns a symbolic link's target.
func (fs *FS) Readlink(cancel <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	rc := fs.request(cancel, h, "readlink")
	defer rc.finish()
	target, err := fs.core.Readlink(rc, fs.creds.cred(h), node(h.NodeId))
	if err != nil {
		return nil, status(err)
	}
	return target, fuse.OK
}

// Access answers access(2) (and chdir) with the server's ACCESS. The
// kernel passes the caller's real uid and gid here, as access(2) wants.
func (fs *FS) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	rc := fs.request(cancel, &in.InHeader, "access")
	defer rc.finish()
	return status(fs.core.Access(rc, fs.creds.cred(&in.InHeader), node(in.NodeId), in.Mask))
}

// StatFs reports the capacity of the export's file system.
func (fs *FS) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	rc := fs.request(cancel, h, "statfs")
	defer rc.finish()
	s, err := fs.core.StatFS(rc, fs.creds.cred(h), node(h.NodeId))
	if err != nil {
		return status(err)
	}
	*out = fuse.StatfsOut{
		Blocks: s.Blocks, Bfree: s.Bfree, Bavail: s.Bavail,
		Files: s.Files, Ffree: s.Ffree,
		Bsize: s.Bsize, Frsize: s.Bsize, NameLen: s.NameLen,
	}
	return fuse.OK
}
