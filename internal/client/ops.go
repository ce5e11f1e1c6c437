package client

import (
	"context"
	"crypto/rand"
	"fmt"
	"syscall"
	"time"

	"hushfs/internal/nfs3"
)

// Entry is the result of a name lookup or creation.
type Entry struct {
	Node     NodeID // 0 with a negative entry (the name does not exist)
	Attr     Attr
	EntryTTL time.Duration // how long the name → node binding may be trusted
	AttrTTL  time.Duration // how long Attr may be trusted
}

// node returns the node for id, or ESTALE if the kernel names a node we
// no longer have.
func (fs *FS) node(id NodeID) (*inode, error) {
	n := fs.nodes.get(id)
	if n == nil {
		return nil, syscall.ESTALE
	}
	return n, nil
}

// GetAttr returns a node's attributes, from the cache while it is valid.
func (fs *FS) GetAttr(ctx context.Context, c *Cred, id NodeID) (Attr, time.Duration, error) {
	n, err := fs.node(id)
	if err != nil {
		return Attr{}, 0, err
	}
	now := fs.now()
	n.mu.Lock()
	a, ttl, ok := n.cachedAttrLocked(now)
	n.mu.Unlock()
	if !ok {
		if a, ttl, err = fs.getattrRPC(ctx, c, n); err != nil {
			return Attr{}, 0, err
		}
	}
	return fs.localAttr(n, &a), ttl, nil
}

// getattrRPC asks the server for a node's attributes and caches them.
func (fs *FS) getattrRPC(ctx context.Context, c *Cred, n *inode) (nfs3.Fattr, time.Duration, error) {
	var res nfs3.GetattrRes
	at := fs.now()
	if err := fs.call(ctx, c, nfs3.ProcGetattr, &nfs3.GetattrArgs{Obj: n.fh}, &res); err != nil {
		return nfs3.Fattr{}, 0, err
	}
	if res.Status != nfs3.OK {
		if res.Status == nfs3.ErrStale {
			fs.nodes.unlinkFH(n)
		}
		return nfs3.Fattr{}, 0, res.Status
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	fs.applyAttrLocked(n, &res.Attr, at)
	_, left, _ := n.cachedAttrLocked(fs.now())
	return res.Attr, left, nil
}

// localAttr converts attributes for the kernel, accounting for data written
// here and not yet sent: the file is as large as its dirty data reaches.
func (fs *FS) localAttr(n *inode, a *nfs3.Fattr) Attr {
	out := attrFromNFS(a)
	if end := fs.wb.dirtyEnd(n); end > out.Size {
		out.Size = end
	}
	return out
}

// entryFor builds the kernel's entry for node n (already referenced). The
// timeouts are what is left of our own cache lifetimes, so the kernel never
// trusts a fact longer than we would.
func (fs *FS) entryFor(n *inode, a *nfs3.Fattr, dir *inode) Entry {
	now := fs.now()
	return Entry{Node: n.id, Attr: fs.localAttr(n, a), EntryTTL: dir.attrLeft(now), AttrTTL: n.attrLeft(now)}
}

// attrLeft returns how long the node's cached attributes stay valid.
func (n *inode) attrLeft(now time.Time) time.Duration {
	n.mu.Lock()
	defer n.mu.Unlock()
	_, left, _ := n.cachedAttrLocked(now)
	return left
}

// rememberChild records that name in dir is node child.
func rememberChild(dir *inode, name string, child NodeID) {
	dir.mu.Lock()
	if dir.children == nil {
		dir.children = map[string]NodeID{}
	}
	dir.children[name] = child
	dir.mu.Unlock()
}

// forgetChild drops what we know of name in dir.
func forgetChild(dir *inode, name string) {
	dir.mu.Lock()
	delete(dir.children, name)
	dir.mu.Unlock()
}

// knownChild returns the node name in dir was last seen to be, if any.
func (fs *FS) knownChild(dir *inode, name string) *inode {
	dir.mu.Lock()
	id, ok := dir.children[name]
	dir.mu.Unlock()
	if !ok {
		return nil
	}
	return fs.nodes.get(id)
}

// Lookup resolves name in directory parent. A name that does not exist
// returns ENOENT and, when negative caching is on, an Entry with Node 0 and
// the time the kernel may remember that.
func (fs *FS) Lookup(ctx context.Context, c *Cred, parent NodeID, name string) (Entry, error) {
	dir, err := fs.node(parent)
	if err != nil {
		return Entry{}, err
	}
	if name == ".." {
		dir.mu.Lock()
		p := dir.parent
		dir.mu.Unlock()
		if p != 0 {
			if pn := fs.nodes.get(p); pn != nil {
				return fs.refEntry(ctx, c, pn, dir)
			}
		}
	}
	if name == "." {
		return fs.refEntry(ctx, c, dir, dir)
	}
	var res nfs3.LookupRes
	at := fs.now()
	args := nfs3.LookupArgs{What: nfs3.DirOpArgs{Dir: dir.fh, Name: []byte(name)}}
	if err := fs.call(ctx, c, nfs3.ProcLookup, &args, &res); err != nil {
		return Entry{}, err
	}
	fs.applyAttr(dir, &res.DirAttr, at)
	if res.Status != nfs3.OK {
		forgetChild(dir, name)
		if res.Status == nfs3.ErrNoEnt && fs.opts.LookupCache == LookupCacheAll && !fs.opts.NoAC {
			return Entry{EntryTTL: fs.opts.NegTimeo}, res.Status
		}
		return Entry{}, res.Status
	}
	n := fs.nodes.ref(res.Obj)
	fs.applyAttr(n, &res.ObjAttr, at)
	a, err := fs.attrOrFetch(ctx, c, n)
	if err != nil {
		fs.nodes.forget(n.id, 1)
		return Entry{}, err
	}
	if name != ".." && a.Type == nfs3.TypeDir {
		n.mu.Lock()
		n.parent = dir.id
		n.mu.Unlock()
	}
	if name != ".." {
		rememberChild(dir, name, n.id)
	}
	return fs.entryFor(n, &a, dir), nil
}

// refEntry returns an entry for a node we already have, with a reference.
func (fs *FS) refEntry(ctx context.Context, c *Cred, n, dir *inode) (Entry, error) {
	a, err := fs.attrOrFetch(ctx, c, n)
	if err != nil {
		return Entry{}, err
	}
	fs.nodes.ref(n.fh)
	return fs.entryFor(n, &a, dir), nil
}

// attrOrFetch returns the node's cached attributes if valid, else fetches.
func (fs *FS) attrOrFetch(ctx context.Context, c *Cred, n *inode) (nfs3.Fattr, error) {
	n.mu.Lock()
	a, _, ok := n.cachedAttrLocked(fs.now())
	n.mu.Unlock()
	if ok {
		return a, nil
	}
	a, _, err := fs.getattrRPC(ctx, c, n)
	return a, err
}

// Forget drops nlookup kernel references on a node.
func (fs *FS) Forget(id NodeID, nlookup uint64) { fs.nodes.forget(id, nlookup) }

// TimeHow says how SetAttr sets a time.
type TimeHow int

const (
	TimeOmit TimeHow = iota // leave unchanged
	TimeNow                 // the server's current time
	TimeSet                 // the given time
)

// SetTime is one time of a SetAttr.
type SetTime struct {
	How  TimeHow
	Time Timespec
}

// SetAttrIn says which attributes to change.
type SetAttrIn struct {
	SetMode bool
	Mode    uint32
	SetUID  bool
	UID     uint32
	SetGID  bool
	GID     uint32
	SetSize bool
	Size    uint64
	Atime   SetTime
	Mtime   SetTime
}

func (in *SetAttrIn) sattr() nfs3.Sattr {
	s := nfs3.Sattr{
		SetMode: in.SetMode, Mode: in.Mode & 07777,
		SetUID: in.SetUID, UID: in.UID,
		SetGID: in.SetGID, GID: in.GID,
		SetSize: in.SetSize, Size: in.Size,
	}
	conv := func(t SetTime) nfs3.SetTime {
		switch t.How {
		case TimeNow:
			return nfs3.SetTime{How: nfs3.SetToServerTime}
		case TimeSet:
			return nfs3.SetTime{How: nfs3.SetToClientTime, Time: nfs3.Time{Seconds: uint32(t.Time.Sec), Nseconds: t.Time.Nsec}}
		}
		return nfs3.SetTime{How: nfs3.DontChange}
	}
	s.Atime, s.Mtime = conv(in.Atime), conv(in.Mtime)
	return s
}

// SetAttr changes attributes. Dirty data is written first, so that a size
// or time set now is not undone by data sent later.
func (fs *FS) SetAttr(ctx context.Context, c *Cred, id NodeID, in SetAttrIn) (Attr, time.Duration, error) {
	n, err := fs.node(id)
	if err != nil {
		return Attr{}, 0, err
	}
	if in.SetSize || in.Atime.How != TimeOmit || in.Mtime.How != TimeOmit {
		if err := fs.wb.flush(ctx, n, nfs3.Unstable); err != nil {
			return Attr{}, 0, err
		}
	}
	args := nfs3.SetattrArgs{Obj: n.fh, Attr: in.sattr()}
	var res nfs3.SetattrRes
	at := fs.now()
	if err := fs.call(ctx, c, nfs3.ProcSetattr, &args, &res); err != nil {
		return Attr{}, 0, err
	}
	fs.applyWcc(n, &res.Wcc, at)
	if res.Status != nfs3.OK {
		return Attr{}, 0, res.Status
	}
	if in.SetSize {
		// The file's data changed size under any cached pages.
		n.mu.Lock()
		n.dataValid = false
		n.mu.Unlock()
	}
	if !res.Wcc.After.Present {
		return fs.GetAttr(ctx, c, id)
	}
	return fs.localAttr(n, &res.Wcc.After.Attr), n.attrLeft(fs.now()), nil
}

// finishCreate turns the reply of CREATE, MKDIR, SYMLINK or MKNOD into a
// referenced node, asking for the handle or attributes if the server left
// them out, as RFC 1813 allows.
func (fs *FS) finishCreate(ctx context.Context, c *Cred, dir *inode, name string, res *nfs3.CreateRes, at time.Time) (Entry, error) {
	fs.applyWcc(dir, &res.DirWcc, at)
	if res.Status != nfs3.OK {
		return Entry{}, res.Status
	}
	if !res.Obj.Present {
		return fs.Lookup(ctx, c, dir.id, name)
	}
	n := fs.nodes.ref(res.Obj.FH)
	fs.applyAttr(n, &res.ObjAttr, at)
	a, err := fs.attrOrFetch(ctx, c, n)
	if err != nil {
		fs.nodes.forget(n.id, 1)
		return Entry{}, err
	}
	n.mu.Lock()
	if a.Type == nfs3.TypeDir {
		n.parent = dir.id
	}
	// A new file's data is what we will write: nothing cached to distrust.
	n.dataValid, n.dataMtime, n.dataSize = true, a.Mtime, a.Size
	n.mu.Unlock()
	rememberChild(dir, name, n.id)
	return fs.entryFor(n, &a, dir), nil
}

// Mkdir creates a directory.
func (fs *FS) Mkdir(ctx context.Context, c *Cred, parent NodeID, name string, mode uint32) (Entry, error) {
	dir, err := fs.node(parent)
	if err != nil {
		return Entry{}, err
	}
	args := nfs3.MkdirArgs{Where: nfs3.DirOpArgs{Dir: dir.fh, Name: []byte(name)},
		Attr: nfs3.Sattr{SetMode: true, Mode: mode & 07777}}
	var res nfs3.MkdirRes
	at := fs.now()
	if err := fs.call(ctx, c, nfs3.ProcMkdir, &args, &res); err != nil {
		return Entry{}, err
	}
	return fs.finishCreate(ctx, c, dir, name, (*nfs3.CreateRes)(&res), at)
}

// Symlink creates a symbolic link holding target verbatim.
func (fs *FS) Symlink(ctx context.Context, c *Cred, parent NodeID, name, target string) (Entry, error) {
	dir, err := fs.node(parent)
	if err != nil {
		return Entry{}, err
	}
	args := nfs3.SymlinkArgs{Where: nfs3.DirOpArgs{Dir: dir.fh, Name: []byte(name)},
		Attr: nfs3.Sattr{SetMode: true, Mode: 0777}, Data: []byte(target)}
	var res nfs3.SymlinkRes
	at := fs.now()
	if err := fs.call(ctx, c, nfs3.ProcSymlink, &args, &res); err != nil {
		return Entry{}, err
	}
	return fs.finishCreate(ctx, c, dir, name, (*nfs3.CreateRes)(&res), at)
}

// Mknod creates a FIFO, socket or device node; a regular file is created
// with CREATE.
func (fs *FS) Mknod(ctx context.Context, c *Cred, parent NodeID, name string, mode, rdev uint32) (Entry, error) {
	dir, err := fs.node(parent)
	if err != nil {
		return Entry{}, err
	}
	var typ nfs3.Ftype
	switch mode & syscall.S_IFMT {
	case syscall.S_IFREG, 0:
		e, _, err := fs.create(ctx, c, dir, name, mode, false, false)
		return e, err
	case syscall.S_IFIFO:
		typ = nfs3.TypeFifo
	case syscall.S_IFSOCK:
		typ = nfs3.TypeSock
	case syscall.S_IFCHR:
		typ = nfs3.TypeChr
	case syscall.S_IFBLK:
		typ = nfs3.TypeBlk
	default:
		return Entry{}, syscall.EINVAL
	}
	args := nfs3.MknodArgs{Where: nfs3.DirOpArgs{Dir: dir.fh, Name: []byte(name)}, Type: typ,
		Attr: nfs3.Sattr{SetMode: true, Mode: mode & 07777},
		Spec: nfs3.SpecData{Major: (rdev >> 8) & 0xfff, Minor: rdev&0xff | (rdev>>12)&0xfff00}}
	var res nfs3.MknodRes
	at := fs.now()
	if err := fs.call(ctx, c, nfs3.ProcMknod, &args, &res); err != nil {
		return Entry{}, err
	}
	return fs.finishCreate(ctx, c, dir, name, (*nfs3.CreateRes)(&res), at)
}

// create sends CREATE: EXCLUSIVE for O_EXCL (then SETATTR for the mode, as
// an exclusive create carries no attributes), UNCHECKED otherwise.
func (fs *FS) create(ctx context.Context, c *Cred, dir *inode, name string, mode uint32, excl, trunc bool) (Entry, bool, error) {
	args := nfs3.CreateArgs{Where: nfs3.DirOpArgs{Dir: dir.fh, Name: []byte(name)}}
	if excl {
		args.Mode = nfs3.Exclusive
		if _, err := rand.Read(args.Verf[:]); err != nil {
			return Entry{}, false, fmt.Errorf("create verifier: %w", err)
		}
	} else {
		args.Mode = nfs3.Unchecked
		args.Attr = nfs3.Sattr{SetMode: true, Mode: mode & 07777}
		if trunc {
			args.Attr.SetSize, args.Attr.Size = true, 0
		}
	}
	var res nfs3.CreateRes
	at := fs.now()
	if err := fs.call(ctx, c, nfs3.ProcCreate, &args, &res); err != nil {
		return Entry{}, false, err
	}
	e, err := fs.finishCreate(ctx, c, dir, name, &res, at)
	if err != nil || !excl {
		return e, false, err
	}
	// The exclusive create stored its verifier in the times: set the real
	// mode and times now.
	set := SetAttrIn{SetMode: true, Mode: mode, Atime: SetTime{How: TimeNow}, Mtime: SetTime{How: TimeNow}}
	a, ttl, err := fs.SetAttr(ctx, c, e.Node, set)
	if err != nil {
		fs.nodes.forget(e.Node, 1)
		return Entry{}, false, err
	}
	e.Attr, e.AttrTTL = a, ttl
	return e, true, nil
}

// Readlink returns a symbolic link's target.
func (fs *FS) Readlink(ctx context.Context, c *Cred, id NodeID) ([]byte, error) {
	n, err := fs.node(id)
	if err != nil {
		return nil, err
	}
	var res nfs3.ReadlinkRes
	at := fs.now()
	if err := fs.call(ctx, c, nfs3.ProcReadlink, &nfs3.ReadlinkArgs{Symlink: n.fh}, &res); err != nil {
		return nil, err
	}
	fs.applyAttr(n, &res.SymlinkAttr, at)
	if res.Status != nfs3.OK {
		return nil, res.Status
	}
	return append([]byte(nil), res.Data...), nil
}

// Link makes newName in newParent another name of node id.
func (fs *FS) Link(ctx context.Context, c *Cred, id, newParent NodeID, newName string) (Entry, error) {
	n, err := fs.node(id)
	if err != nil {
		return Entry{}, err
	}
	dir, err := fs.node(newParent)
	if err != nil {
		return Entry{}, err
	}
	args := nfs3.LinkArgs{File: n.fh, Link: nfs3.DirOpArgs{Dir: dir.fh, Name: []byte(newName)}}
	var res nfs3.LinkRes
	at := fs.now()
	if err := fs.call(ctx, c, nfs3.ProcLink, &args, &res); err != nil {
		return Entry{}, err
	}
	fs.applyWcc(dir, &res.LinkDirWcc, at)
	fs.applyAttr(n, &res.FileAttr, at)
	if !res.FileAttr.Present {
		n.invalidateAttr() // nlink and ctime changed
	}
	if res.Status != nfs3.OK {
		return Entry{}, res.Status
	}
	a, err := fs.attrOrFetch(ctx, c, n)
	if err != nil {
		return Entry{}, err
	}
	fs.nodes.ref(n.fh)
	rememberChild(dir, newName, n.id)
	return fs.entryFor(n, &a, dir), nil
}

// Unlink removes a name. A file still open here is renamed to a hidden
// name instead and removed at its last close, so its open descriptors keep
// working, as kernel NFS clients do.
func (fs *FS) Unlink(ctx context.Context, c *Cred, parent NodeID, name string) error {
	dir, err := fs.node(parent)
	if err != nil {
		return err
	}
	if child := fs.knownChild(dir, name); child != nil && fs.nodes.openCount(child) > 0 {
		return fs.sillyRename(ctx, c, dir, name, child)
	}
	return fs.remove(ctx, c, dir, name, nfs3.ProcRemove)
}

// Rmdir removes an empty directory.
func (fs *FS) Rmdir(ctx context.Context, c *Cred, parent NodeID, name string) error {
	dir, err := fs.node(parent)
	if err != nil {
		return err
	}
	return fs.remove(ctx, c, dir, name, nfs3.ProcRmdir)
}

func (fs *FS) remove(ctx context.Context, c *Cred, dir *inode, name string, proc uint32) error {
	args := nfs3.RemoveArgs{Obj: nfs3.DirOpArgs{Dir: dir.fh, Name: []byte(name)}}
	var res nfs3.RemoveRes
	at := fs.now()
	if err := fs.call(ctx, c, proc, &args, &res); err != nil {
		return err
	}
	fs.applyWcc(dir, &res.DirWcc, at)
	if res.Status != nfs3.OK {
		return res.Status
	}
	if child := fs.knownChild(dir, name); child != nil {
		child.invalidateAttr() // nlink and ctime changed
	}
	forgetChild(dir, name)
	return nil
}

// sillyRename hides an open file under a unique name in the same directory.
func (fs *FS) sillyRename(ctx context.Context, c *Cred, dir *inode, name string, child *inode) error {
	fs.sillyMu.Lock()
	fs.sillySeq++
	seq := fs.sillySeq
	fs.sillyMu.Unlock()
	child.mu.Lock()
	fileid := child.attr.Fileid
	child.mu.Unlock()
	hidden := fmt.Sprintf(".nfs%016x%08x", fileid, seq)
	if err := fs.rename(ctx, c, dir, name, dir, hidden); err != nil {
		return err
	}
	child.mu.Lock()
	child.sillyDir, child.sillyName = dir.id, hidden
	child.mu.Unlock()
	return nil
}

// Rename renames oldName in oldParent to newName in newParent, replacing
// what newName named. A replaced file that is open here is first hidden,
// so its open descriptors keep working.
func (fs *FS) Rename(ctx context.Context, c *Cred, oldParent NodeID, oldName string, newParent NodeID, newName string) error {
	from, err := fs.node(oldParent)
	if err != nil {
		return err
	}
	to, err := fs.node(newParent)
	if err != nil {
		return err
	}
	if victim := fs.knownChild(to, newName); victim != nil && fs.nodes.openCount(victim) > 0 {
		if moved := fs.knownChild(from, oldName); moved != victim {
			if err := fs.sillyRename(ctx, c, to, newName, victim); err != nil {
				return err
			}
		}
	}
	return fs.rename(ctx, c, from, oldName, to, newName)
}

func (fs *FS) rename(ctx context.Context, c *Cred, from *inode, oldName string, to *inode, newName string) error {
	args := nfs3.RenameArgs{From: nfs3.DirOpArgs{Dir: from.fh, Name: []byte(oldName)},
		To: nfs3.DirOpArgs{Dir: to.fh, Name: []byte(newName)}}
	var res nfs3.RenameRes
	at := fs.now()
	if err := fs.call(ctx, c, nfs3.ProcRename, &args, &res); err != nil {
		return err
	}
	fs.applyWcc(from, &res.FromDirWcc, at)
	if to != from {
		fs.applyWcc(to, &res.ToDirWcc, at)
	}
	if res.Status != nfs3.OK {
		return res.Status
	}
	moved := fs.knownChild(from, oldName)
	if victim := fs.knownChild(to, newName); victim != nil && victim != moved {
		victim.invalidateAttr()
	}
	forgetChild(from, oldName)
	forgetChild(to, newName)
	if moved != nil {
		moved.invalidateAttr() // ctime changed
		moved.mu.Lock()
		if moved.attr.Type == nfs3.TypeDir {
			moved.parent = to.id
		}
		moved.mu.Unlock()
		rememberChild(to, newName, moved.id)
	}
	return nil
}

// Access mask bits as access(2) takes them.
const (
	AccessRead  = 4
	AccessWrite = 2
	AccessExec  = 1
)

// Access checks access(2)-style permission with the server's ACCESS.
func (fs *FS) Access(ctx context.Context, c *Cred, id NodeID, mask uint32) error {
	n, err := fs.node(id)
	if err != nil {
		return err
	}
	if mask == 0 {
		_, _, err := fs.GetAttr(ctx, c, id)
		return err
	}
	n.mu.Lock()
	isDir := n.attrValid && n.attr.Type == nfs3.TypeDir
	n.mu.Unlock()
	var want uint32
	if mask&AccessRead != 0 {
		want |= nfs3.AccessRead
	}
	if mask&AccessWrite != 0 {
		want |= nfs3.AccessModify | nfs3.AccessExtend
		if isDir {
			want |= nfs3.AccessDelete
		}
	}
	if mask&AccessExec != 0 {
		if isDir {
			want |= nfs3.AccessLookup
		} else {
			want |= nfs3.AccessExecute
		}
	}
	var res nfs3.AccessRes
	at := fs.now()
	if err := fs.call(ctx, c, nfs3.ProcAccess, &nfs3.AccessArgs{Obj: n.fh, Access: want}, &res); err != nil {
		return err
	}
	fs.applyAttr(n, &res.ObjAttr, at)
	if res.Status != nfs3.OK {
		return res.Status
	}
	if res.Access&want != want {
		return syscall.EACCES
	}
	return nil
}

// StatFS is a file system's capacity, as statfs(2) reports it.
type StatFS struct {
	Blocks, Bfree, Bavail uint64 // in units of Bsize
	Files, Ffree          uint64
	Bsize                 uint32
	NameLen               uint32
}

// StatFS reports the capacity of the file system holding node id.
func (fs *FS) StatFS(ctx context.Context, c *Cred, id NodeID) (StatFS, error) {
	n, err := fs.node(id)
	if err != nil {
		return StatFS{}, err
	}
	var res nfs3.FsstatRes
	at := fs.now()
	if err := fs.call(ctx, c, nfs3.ProcFsstat, &nfs3.FsstatArgs{Root: n.fh}, &res); err != nil {
		return StatFS{}, err
	}
	fs.applyAttr(n, &res.ObjAttr, at)
	if res.Status != nfs3.OK {
		return StatFS{}, res.Status
	}
	const bsize = 4096
	return StatFS{
		Blocks: res.Tbytes / bsize, Bfree: res.Fbytes / bsize, Bavail: res.Abytes / bsize,
		Files: res.Tfiles, Ffree: res.Afiles, Bsize: bsize, NameLen: 255,
	}, nil
}
