package server

import (
	"bytes"
	"encoding/binary"
	"errors"

	"golang.org/x/sys/unix"

	"hushfs/internal/nfs3"
)

func (s *Server) lookup(id *identity, a *nfs3.LookupArgs) (r nfs3.LookupRes) {
	dir, err := s.resolve(a.What.Dir)
	if err != nil {
		r.Status = s.statusOf(err)
		return r
	}
	defer s.cache.release(dir)
	var dst unix.Stat_t
	if err := s.stat(dir, &dst); err != nil {
		r.Status = s.statusOf(err)
		return r
	}
	r.DirAttr = s.postOp(&dst)
	if !dir.isDir() {
		r.Status = nfs3.ErrNotDir
		return r
	}
	if err := checkName(a.What.Name); err != nil {
		r.Status = s.statusOf(err)
		return r
	}
	name := string(a.What.Name)
	var child *node
	parentFd := -1
	err = s.as(id, func() error {
		if name == ".." && dir.isRoot {
			// The export root is its own parent: nothing above it is
			// reachable. Looking it up still needs search permission.
			if err := accessOK(dir.fd, unix.X_OK); err != nil {
				return err
			}
			s.cache.mu.Lock()
			dir.refs++
			s.cache.mu.Unlock()
			child = dir
			return nil
		}
		if name == ".." {
			// Opened with the caller's credentials (the kernel checks
			// search permission); whether the parent lies in the export
			// is checked below, with the server's.
			fd, err := openDotDot(dir.fd)
			if err != nil {
				return err
			}
			parentFd = fd
			return nil
		}
		fd, err := openEntry(dir.fd, name, 0)
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			unix.Close(fd)
			return err
		}
		child, err = s.nodeFromFd(fd, &st)
		return err
	})
	if err == nil && parentFd >= 0 {
		child, err = s.parentNode(parentFd)
	}
	// An entry removed between its opening and now (by another client or
	// a local process) no longer exists: NOENT. STALE would speak of the
	// directory, the only handle in the call, which is still there.
	childStatus := func(err error) nfs3.Status {
		st := s.statusOf(err)
		if st == nfs3.ErrStale && name != ".." {
			st = nfs3.ErrNoEnt
		}
		return st
	}
	if err != nil {
		r.Status = childStatus(err)
		return r
	}
	defer s.cache.release(child)
	var st unix.Stat_t
	if err := s.stat(child, &st); err != nil {
		r.Status = childStatus(err)
		return r
	}
	r.Obj = child.fh
	r.ObjAttr = s.postOp(&st)
	return r
}

// newEntry finishes making an entry: it opens the new object as O_PATH
// (checking it is of the type made), applies the attributes, and returns its
// node. It runs with the caller's credentials.
func (s *Server) newEntry(id *identity, dir *node, name string, ftype uint32, sa *nfs3.Sattr) (*node, error) {
	extra := 0
	if ftype == unix.S_IFDIR {
		extra = unix.O_DIRECTORY
	}
	fd, err := openEntry(dir.fd, name, extra)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, err
	}
	if st.Mode&unix.S_IFMT != ftype {
		unix.Close(fd) // replaced under us by a local process
		return nil, nfs3.ErrExist
	}
	if err := s.applySattr(id, fd, &st, sa, -1); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return s.nodeFromFd(fd, &st)
}

// creationSattr is the attributes to apply to a new object: the client's,
// with the mode always set so that the server's umask does not change it.
// A directory keeps the set-group-ID bit it inherits from its parent.
func creationSattr(sa *nfs3.Sattr, defMode uint32, st *unix.Stat_t) nfs3.Sattr {
	out := *sa
	out.SetSize = false
	if !out.SetMode {
		out.SetMode, out.Mode = true, defMode
	}
	out.Mode &= 0o7777
	if st != nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		out.Mode |= st.Mode & unix.S_ISGID
	}
	return out
}

// adoptRW keeps fd, a descriptor of n's new file open for reading and
// writing, as the node's I/O descriptor, saving the WRITE that usually
// follows a CREATE from opening the file again. It reports false if the
// node has one already.
func (s *Server) adoptRW(n *node, fd int) bool {
	n.omu.Lock()
	defer n.omu.Unlock()
	if n.rwFd >= 0 {
		return false
	}
	n.rwFd = fd
	s.cache.openCount.Add(1)
	return true
}

// newObj is what an operation that makes an entry (CREATE, MKDIR,
// SYMLINK, MKNOD) hands to dirOpReply: the object's node (nil on failure);
// whether it is new, or else (a CREATE of an existing file) whether it was
// truncated: what there is to make durable; a descriptor of a new regular
// file open for writing (-1: none; dirOpReply closes it); and the object's
// attributes when known to be current (valid).
type newObj struct {
	node      *node
	created   bool
	truncated bool
	rw        int
	st        unix.Stat_t
	valid     bool
}

// dirOpReply makes the change durable and fills a CREATE/MKDIR/SYMLINK/
// MKNOD result.
func (s *Server) dirOpReply(op *dirOp, obj *newObj, err error) (r nfs3.DirOpRes) {
	s.dirChanged(op)
	child := obj.node
	switch {
	case err != nil:
	case obj.created:
		err = s.commitNew(op.dir, child, obj.rw)
	case obj.truncated:
		err = s.commitAttrs(child)
	}
	if obj.rw >= 0 && (err != nil || !s.adoptRW(child, obj.rw)) {
		unix.Close(obj.rw)
	}
	if err == nil {
		if obj.valid || unix.Fstat(child.fd, &obj.st) == nil {
			r.ObjAttr = s.postOp(&obj.st)
		}
		r.Obj = nfs3.PostOpFH{Present: true, FH: child.fh}
	} else {
		r.Status = s.statusOf(err)
	}
	if child != nil {
		s.cache.release(child)
	}
	s.endDirOp(op)
	r.DirWcc = op.wcc
	return r
}

// exclusiveTimes is where an EXCLUSIVE create keeps the client's verifier
// until the client's SETATTR replaces it: in the new file's mtime and atime
// seconds (31 bits each, so the times stay positive).
func exclusiveTimes(v nfs3.Verf) (mtime, atime int64) {
	return int64(binary.BigEndian.Uint32(v[0:4]) & 0x7fffffff),
		int64(binary.BigEndian.Uint32(v[4:8]) & 0x7fffffff)
}

func (s *Server) create(id *identity, a *nfs3.CreateArgs) nfs3.CreateRes {
	op, status := s.beginDirOp(a.Where.Dir, a.Where.Name, true)
	if status != nfs3.OK {
		return nfs3.CreateRes{Status: status, DirWcc: op.wcc}
	}
	dir, name := op.dir, string(a.Where.Name)
	obj := newObj{rw: -1}
	err := s.as(id, func() (err error) {
		mode := uint32(defaultFileMode)
		if a.Mode == nfs3.Exclusive {
			mode = 0o600 // until the client's SETATTR sets the real mode
		} else if a.Attr.SetMode {
			mode = a.Attr.Mode & 0o7777
		}
		fd, err := unix.Openat(dir.fd, name,
			unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, mode)
		if errors.Is(err, unix.EEXIST) {
			obj.node, obj.truncated, err = s.createExisting(id, dir, name, a)
			return err
		}
		if err != nil {
			return err
		}
		// The entry is made: the directory's attributes after the change
		// are current now, and its lock is released before the new
		// file's own system calls (stat, mode, handle), which the other
		// changes of a busy directory would otherwise wait for.
		s.dirChanged(op)
		// Kept open until the reply: the sync that makes the file
		// durable needs a descriptor that is not O_PATH.
		obj.rw, obj.created = fd, true
		st := &obj.st
		if err := unix.Fstat(fd, st); err != nil {
			return err
		}
		changed := false
		if a.Mode == nfs3.Exclusive {
			mt, at := exclusiveTimes(a.Verf)
			ts := []unix.Timespec{{Sec: at}, {Sec: mt}}
			if err := unix.UtimesNanoAt(fd, "", ts, unix.AT_EMPTY_PATH); err != nil {
				return err
			}
			changed = true
		} else {
			sa := creationSattr(&a.Attr, mode, nil)
			if a.Attr.SetSize && a.Attr.Size != 0 {
				sa.SetSize, sa.Size = true, a.Attr.Size
			}
			changed = sattrChanges(&sa, st)
			// fd is open for writing (a new file's creator gets that
			// whatever the mode), so truncating needs no permission check.
			if err := s.applySattr(&identity{}, fd, st, &sa, fd); err != nil {
				return err
			}
		}
		if changed {
			if err := unix.Fstat(fd, st); err != nil {
				return err
			}
		}
		pfd, err := unix.Open(procFdPath(fd), unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		obj.node, err = s.nodeFromFd(pfd, st)
		obj.valid = err == nil
		return err
	})
	return s.dirOpReply(op, &obj, err)
}

// sattrChanges reports whether applySattr(sa) on a file with attributes st
// will change anything (so that st will no longer be current).
func sattrChanges(sa *nfs3.Sattr, st *unix.Stat_t) bool {
	return sa.SetSize || sa.SetUID || sa.SetGID ||
		sa.Atime.How != nfs3.DontChange || sa.Mtime.How != nfs3.DontChange ||
		(sa.SetMode && sa.Mode&0o7777 != st.Mode&0o7777)
}

// createExisting handles CREATE of a name that exists: GUARDED fails;
// UNCHECKED opens the existing regular file, truncating it if asked;
// EXCLUSIVE succeeds only if the file is the one an earlier transmission of
// the same request created (its times hold the verifier), so a retransmitted
// create gets the same file. Runs with the caller's credentials.
func (s *Server) createExisting(id *identity, dir *node, name string, a *nfs3.CreateArgs) (n *node, truncated bool, err error) {
	if a.Mode == nfs3.Guarded {
		return nil, false, nfs3.ErrExist
	}
	fd, err := openEntry(dir.fd, name, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, false, nfs3.ErrExist // removed meanwhile; let the client retry
		}
		return nil, false, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, false, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, false, nfs3.ErrExist
	}
	switch a.Mode {
	case nfs3.Exclusive:
		mt, at := exclusiveTimes(a.Verf)
		if st.Mtim.Sec != mt || st.Atim.Sec != at || st.Size != 0 {
			unix.Close(fd)
			return nil, false, nfs3.ErrExist
		}
	case nfs3.Unchecked:
		if a.Attr.SetSize {
			sa := nfs3.Sattr{SetSize: true, Size: a.Attr.Size}
			if err := s.applySattr(id, fd, &st, &sa, -1); err != nil {
				unix.Close(fd)
				return nil, false, err
			}
			truncated = true
		}
	}
	// Nothing to make durable unless the file was truncated: the entry
	// and the inode are as they were.
	n, err = s.nodeFromFd(fd, &st)
	return n, truncated, err
}

func (s *Server) mkdir(id *identity, a *nfs3.MkdirArgs) nfs3.MkdirRes {
	op, status := s.beginDirOp(a.Where.Dir, a.Where.Name, true)
	if status != nfs3.OK {
		return nfs3.MkdirRes{Status: status, DirWcc: op.wcc}
	}
	dir, name := op.dir, string(a.Where.Name)
	obj := newObj{rw: -1}
	err := s.as(id, func() (err error) {
		sa := creationSattr(&a.Attr, defaultDirMode, nil)
		if err := unix.Mkdirat(dir.fd, name, sa.Mode&0o1777); err != nil {
			return err
		}
		obj.created = true
		// The new directory may have inherited set-group-ID: keep it.
		var st unix.Stat_t
		if err := unix.Fstatat(dir.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err == nil {
			sa = creationSattr(&a.Attr, defaultDirMode, &st)
		}
		obj.node, err = s.newEntry(id, dir, name, unix.S_IFDIR, &sa)
		return err
	})
	return s.dirOpReply(op, &obj, err)
}

func (s *Server) symlink(id *identity, a *nfs3.SymlinkArgs) nfs3.SymlinkRes {
	op, status := s.beginDirOp(a.Where.Dir, a.Where.Name, true)
	if status != nfs3.OK {
		return nfs3.SymlinkRes{Status: status, DirWcc: op.wcc}
	}
	if len(a.Data) == 0 || bytes.IndexByte(a.Data, 0) >= 0 {
		s.endDirOp(op)
		return nfs3.SymlinkRes{Status: nfs3.ErrInval, DirWcc: op.wcc}
	}
	dir, name := op.dir, string(a.Where.Name)
	obj := newObj{rw: -1}
	err := s.as(id, func() (err error) {
		// The target is stored verbatim: it is only ever interpreted by
		// clients.
		if err := unix.Symlinkat(string(a.Data), dir.fd, name); err != nil {
			return err
		}
		obj.created = true
		sa := a.Attr
		sa.SetSize, sa.SetMode = false, false
		obj.node, err = s.newEntry(id, dir, name, unix.S_IFLNK, &sa)
		return err
	})
	return s.dirOpReply(op, &obj, err)
}

func (s *Server) mknod(id *identity, a *nfs3.MknodArgs) nfs3.MknodRes {
	op, status := s.beginDirOp(a.Where.Dir, a.Where.Name, true)
	if status != nfs3.OK {
		return nfs3.MknodRes{Status: status, DirWcc: op.wcc}
	}
	var ftype uint32
	var dev uint64
	switch a.Type {
	case nfs3.TypeFifo:
		ftype = unix.S_IFIFO
	case nfs3.TypeSock:
		ftype = unix.S_IFSOCK
	case nfs3.TypeChr, nfs3.TypeBlk:
		ftype = unix.S_IFCHR
		if a.Type == nfs3.TypeBlk {
			ftype = unix.S_IFBLK
		}
		dev = unix.Mkdev(a.Spec.Major, a.Spec.Minor)
		if !id.isRoot() {
			status = nfs3.ErrPerm // device nodes only for the superuser
		}
	default:
		status = nfs3.ErrBadType // regular files, directories, links have their own procedures
	}
	if status != nfs3.OK {
		s.endDirOp(op)
		return nfs3.MknodRes{Status: status, DirWcc: op.wcc}
	}
	dir, name := op.dir, string(a.Where.Name)
	obj := newObj{rw: -1}
	err := s.as(id, func() (err error) {
		sa := creationSattr(&a.Attr, defaultFileMode, nil)
		if err := unix.Mknodat(dir.fd, name, ftype|(sa.Mode&0o7777), int(dev)); err != nil {
			return err
		}
		obj.created = true
		obj.node, err = s.newEntry(id, dir, name, ftype, &sa)
		return err
	})
	return s.dirOpReply(op, &obj, err)
}

// remove serves REMOVE and RMDIR.
func (s *Server) remove(id *identity, a *nfs3.DirOpArgs, isDir bool) nfs3.RemoveRes {
	op, status := s.beginDirOp(a.Dir, a.Name, false)
	if status != nfs3.OK {
		return nfs3.RemoveRes{Status: status, DirWcc: op.wcc}
	}
	dir, name := op.dir, string(a.Name)
	var victim uint64
	err := s.as(id, func() error {
		var st unix.Stat_t
		if unix.Fstatat(dir.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			victim = st.Ino
		}
		flags := 0
		if isDir {
			flags = unix.AT_REMOVEDIR
		}
		err := unix.Unlinkat(dir.fd, name, flags)
		if isDir && errors.Is(err, unix.EEXIST) {
			return nfs3.ErrNotEmpty // POSIX lets rmdir say either
		}
		return err
	})
	s.dirChanged(op)
	if err == nil && victim != 0 {
		s.cache.forgetIfUnlinked(victim)
	}
	if err == nil {
		err = s.commitDir(dir)
	}
	s.endDirOp(op)
	r := nfs3.RemoveRes{DirWcc: op.wcc}
	if err != nil {
		r.Status = s.statusOf(err)
	}
	return r
}

func (s *Server) rename(id *identity, a *nfs3.RenameArgs) (r nfs3.RenameRes) {
	from, to, status := s.beginRenameOps(a)
	if status != nfs3.OK {
		r.Status, r.FromDirWcc, r.ToDirWcc = status, from.wcc, to.wcc
		return r
	}
	fromName, toName := string(a.From.Name), string(a.To.Name)
	var victim, moved uint64
	err := s.as(id, func() error {
		var st unix.Stat_t
		if unix.Fstatat(to.dir.fd, toName, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			victim = st.Ino
		}
		if unix.Fstatat(from.dir.fd, fromName, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			moved = st.Ino
		}
		return unix.Renameat(from.dir.fd, fromName, to.dir.fd, toName)
	})
	s.dirChanged(from, to)
	if err == nil && victim != 0 && victim != moved {
		s.cache.forgetIfUnlinked(victim)
	}
	if err == nil {
		err = s.commitDir(from.dir)
	}
	if err == nil && to.dir != from.dir {
		err = s.commitDir(to.dir)
	}
	s.endDirOp(from)
	s.endDirOp(to)
	r.FromDirWcc, r.ToDirWcc = from.wcc, to.wcc
	if err != nil {
		r.Status = s.statusOf(err)
	}
	return r
}

func (s *Server) link(id *identity, a *nfs3.LinkArgs) (r nfs3.LinkRes) {
	file, err := s.resolve(a.File)
	if err != nil {
		r.Status = s.statusOf(err)
		return r
	}
	defer s.cache.release(file)
	var fst unix.Stat_t
	if err := s.stat(file, &fst); err != nil {
		r.Status = s.statusOf(err)
		return r
	}
	op, status := s.beginDirOp(a.Link.Dir, a.Link.Name, true)
	if status != nfs3.OK {
		r.Status, r.FileAttr, r.LinkDirWcc = status, s.postOp(&fst), op.wcc
		return r
	}
	dir, name := op.dir, string(a.Link.Name)
	err = s.as(id, func() error {
		// linkat with AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; the /proc
		// name of the descriptor does not, and keeps the kernel's own
		// checks (protected_hardlinks) in force for the caller.
		return unix.Linkat(unix.AT_FDCWD, procFdPath(file.fd), dir.fd, name, unix.AT_SYMLINK_FOLLOW)
	})
	s.dirChanged(op)
	if err == nil {
		err = s.commitDir(dir)
	}
	s.endDirOp(op)
	r.LinkDirWcc = op.wcc
	r.FileAttr = s.postOpOf(file)
	if err != nil {
		r.Status = s.statusOf(err)
	}
	return r
}
